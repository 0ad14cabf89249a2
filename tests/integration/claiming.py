"""One batch claimed as a round claims it, for the tests that read or send a batch by hand
(the lanes' contract, the direct lane's read)."""

from __future__ import annotations

from outbox_relay.config import Config
from outbox_relay.control.claims import Claims, TopicLimits
from outbox_relay.control.db import Database
from outbox_relay.control.locks import Backoff, TopicLocks
from outbox_relay.rules.cloudevent_topics import TopicFlags
from outbox_relay.rules.topic_rules import rule_for

TOKEN = "claimed-by-hand@test"


def claim_all(config: Config, topics: list[str], partitions: dict[str, int]) -> int:
    """A batch of every row of `topics` (locked with TOKEN), each topic's partition count
    set to `partitions`' (a topic not in it keeps an unknown count); its batch id."""
    db = Database(config.postgres)
    try:
        locks = TopicLocks(db, TOKEN, 60, Backoff(1, 2))
        assert locks.acquire(topics) == sorted(topics)
        claims = Claims(db, TOKEN, 60, config.relay.header_prefix, config.relay.source_name)
        limits = [TopicLimits(t, 1_000_000, compact=False, partitions=partitions.get(t),
                              partitioner=config.relay.partitioner,
                              flags=TopicFlags.of(rule_for(config.relay.topic_rules, t)))
                  for t in topics]
        for topic, count in partitions.items():
            db.execute("UPDATE kafka_topic_info SET partition_count = %s WHERE topic = %s",
                       (count, topic))
        batch = claims.claim(limits, 10_000, 10**9)
        assert batch.batch_id is not None
        assert all(c.rows and c.bad_id is None for c in batch.claims), batch.claims
        return batch.batch_id
    finally:
        db.close()

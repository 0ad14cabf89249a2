"""A failed combined write: the bad topic is found in O(log n) writes, and a lost lock
cancels the write in flight."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

from relay.stack import StackInfo
from relay.stream.delivery import Delivery
from relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import Msg, consume, create_topics, insert, query, unique

pytestmark = pytest.mark.integration

TOPICS = 16


def test_one_poison_topic_among_many_is_found_in_log_n_writes(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    healthy = [unique(f"bis{i:02d}") for i in range(TOPICS - 1)]
    bad = unique("bis-bad")
    create_topics(stack.kafka_bootstrap, dict.fromkeys(healthy, 1))
    # A keyless record on a topic compacted in Kafka, while the relay's view of the topic's
    # config is stale: only the broker refuses it (InvalidRecordException).
    create_topics(stack.kafka_bootstrap, {bad: 1}, **{"cleanup.policy": "compact"})
    monkeypatch.setenv("RELAY_FAILPOINTS", "stale_topic_config")
    traffic = [[Msg(t, f"k{i}".encode(), f"{t}-{i}".encode())] for t in healthy
               for i in range(3)]
    traffic += [[Msg(bad, b"k", b"ok-0")], [Msg(bad, None, b"no key")], [Msg(bad, b"k", b"ok-1")]]
    ids = insert(migrated_url, traffic)
    poison = ids[-2]
    writes: list[tuple[list[str] | None, Any]] = []
    original = Delivery._write

    def counted(self: Delivery, batch_id: int, counts: dict[str, int],
                topics: list[str] | None, id_range: Any) -> None:
        writes.append((topics, id_range))
        original(self, batch_id, counts, topics, id_range)

    monkeypatch.setattr(Delivery, "_write", counted)
    config = make_config([*healthy, bad], relay={
        "topic_rules": [{"match": ".*", "policy": "park"}], "batch_size": 100})

    result = run_relay(config)

    assert result.exit_code == EXIT_OK
    topic_writes = [t for t, r in writes if r is None]
    print(f"writes: {len(writes)} in all, {len(topic_writes)} over whole topics")
    # The combined write, then about 2*log2(n) halves; never one write per topic.
    assert len(topic_writes) <= 1 + 2 * math.ceil(math.log2(TOPICS)), topic_writes
    assert all(t == [bad] for t, r in writes if r is not None), "only the bad topic isolated"
    assert [i for (i,) in query(migrated_url, "SELECT id FROM relay_parked_messages")] == [poison]
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0] == 0
    got = consume(stack.kafka_bootstrap, [*healthy, bad], expect=len(ids) - 1)
    copies = Counter(r.outbox_id for r in got)
    assert set(copies) == set(ids) - {poison}, "every healthy message delivered"
    assert max(copies.values()) <= 2, "at most one extra copy of a healthy message"

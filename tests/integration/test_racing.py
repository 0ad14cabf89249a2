"""Two relays on the same topics: never two owners at once, nothing lost, order kept."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from pyspark.sql import SparkSession

from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from outbox_relay.stream.stop import StopSignal
from outbox_relay.wiring import process_token
from tests.integration.conftest import ConfigFactory, RelayRunner, run_in_thread
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    insert,
    query,
    unique,
    wait_for,
)

pytestmark = pytest.mark.integration

# Test-only: every change of a topic's owner, with the database's clock.
LOCK_EVENTS = """
CREATE TABLE lock_events (
    seq serial PRIMARY KEY, topic varchar, old_owner varchar, new_owner varchar,
    old_locked_at timestamp, at timestamp DEFAULT (clock_timestamp() AT TIME ZONE 'UTC')
);
CREATE FUNCTION record_lock_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.locked_by IS DISTINCT FROM OLD.locked_by THEN
        INSERT INTO lock_events (topic, old_owner, new_owner, old_locked_at)
        VALUES (NEW.topic, OLD.locked_by, NEW.locked_by, OLD.locked_at);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER lock_events AFTER UPDATE ON kafka_topic_info
    FOR EACH ROW EXECUTE FUNCTION record_lock_event();
"""

MAX_BACKLOGS = 5


def _owners(url: str) -> set[str]:
    """The relays that took a lock; a relay's drain lanes take them under its own token."""
    return {process_token(o) for (o,) in query(
        url, "SELECT DISTINCT new_owner FROM lock_events WHERE new_owner IS NOT NULL")}


def test_two_relays_never_both_own_a_topic(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    spark: SparkSession,
) -> None:
    query(migrated_url, LOCK_EVENTS)
    topics = [unique("race-a"), unique("race-b"), unique("race-c")]
    create_topics(stack.kafka_bootstrap, {t: 2 for t in topics})
    # Small batches: each relay releases its topics after every batch, so the two
    # interleave many times instead of one draining everything alone.
    configs = [make_config(topics, name=n, relay={"batch_size": 60}) for n in ("one", "two")]
    stops = [StopSignal(), StopSignal()]
    runs = [run_in_thread(lambda c=c, s=s: run_relay(c, available_now=False, stop=s))  # type: ignore[misc]
            for c, s in zip(configs, stops, strict=True)]
    # Both race from the first message: on a loaded machine a relay that starts its
    # query late would otherwise find the outbox already drained by the other.
    assert wait_for(lambda: len(spark.streams.active) == 2, 300, 0.2), \
        "timed out waiting for both relays' queries to start"
    # One relay can drain a backlog alone: the other may be idle between its polls for
    # the whole second the drain takes. Another backlog, until both have taken a lock,
    # makes the race certain; the assertions cover every backlog.
    ids: list[int] = []
    for backlog in range(MAX_BACKLOGS):
        ids += insert(migrated_url, [
            [Msg(topics[(t + i) % 3], f"k{(t * 7 + i) % 23}".encode(),
                 f"{backlog}-{t}-{i}".encode()) for i in range(10)]
            for t in range(400)
        ])
        assert wait_for(lambda: query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0]
                        == 0, 600, 0.2), "timed out waiting for the outbox to drain"
        if len(_owners(migrated_url)) == 2:
            break
    print(f"{backlog + 1} backlog(s) of 4,000 written before both relays had taken a lock")
    for stop in stops:
        stop.request("test: drained")
    for thread, _ in runs:
        thread.join(timeout=300)
    results = [r for _, rs in runs for r in rs]

    assert [r.exit_code for r in results] == [EXIT_OK, EXIT_OK]
    got = consume(stack.kafka_bootstrap, topics, expect=len(ids))
    counts = Counter(r.outbox_id for r in got)
    assert set(counts) == set(ids) and max(counts.values()) == 1
    by_key: dict[tuple[str, bytes | None], list[tuple[int, int]]] = defaultdict(list)
    for r in got:
        by_key[(r.topic, r.key)].append((r.offset, r.outbox_id))
    for seen in by_key.values():
        in_log_order = [i for _, i in sorted(seen)]
        assert in_log_order == sorted(in_log_order)
    # Ownership only ever passes through "nobody": a direct hand-over from one owner to
    # another would mean a lock was taken while still held.
    steals = query(migrated_url, "SELECT topic, old_owner, new_owner FROM lock_events "
                   "WHERE old_owner IS NOT NULL AND new_owner IS NOT NULL")
    assert steals == []
    owners = _owners(migrated_url)
    assert len(owners) == 2, f"both relays took locks: {sorted(owners)}"
    published = sum(sum(r.stats.published.values()) for r in results)
    assert published == len(ids)

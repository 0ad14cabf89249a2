"""The drain lane's faults on the real stack, each checked through a consumer (no loss,
every first appearance in key order, every key shape): its lock taken by another relay
mid-round, its connection dropped by the server after a round, a stop during its write.

A topic of 3,000 rows in claims of 150 moves to the drain lane after its first round
(outbox_relay.stream.lanes); what the lane holds is read from PostgreSQL while it runs.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg2
import pytest
from pyspark.sql import SparkSession

from outbox_relay.config import Config
from outbox_relay.control.claims import Claim
from outbox_relay.control.db import Database
from outbox_relay.control.pending import relays_polling
from outbox_relay.stack import StackInfo
from outbox_relay.stream import batch
from outbox_relay.stream.delivery import Delivery, Outcome
from outbox_relay.stream.lanes import LANE_THREAD
from outbox_relay.stream.runner import EXIT_INTERRUPTED, EXIT_OK, RunResult, run
from outbox_relay.stream.stop import StopSignal
from outbox_relay.wiring import DRAIN_SUFFIX, Relay, build_relay
from tests.integration.conftest import ConfigFactory, run_in_thread
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    every_key_shape,
    insert,
    order_report,
    query,
    unique,
    wait_for,
)

pytestmark = pytest.mark.integration

LEFT = "SELECT count(*) FROM kafka_messages WHERE topic = ANY(%s)"

DRAIN_HOLDS = ("SELECT count(*) FROM kafka_topic_info WHERE topic = %s AND locked_by LIKE %s")
# The lane holds the topic and has claimed: its write runs until the delete.
DRAIN_WRITES = ("SELECT count(*) FROM kafka_topic_info i JOIN relay_sessions s "
                "ON s.lock_token = i.locked_by AND s.topic = i.topic "
                "WHERE i.topic = %s AND i.locked_by LIKE %s")
STEAL = ("UPDATE kafka_topic_info SET locked_by = 'another-relay', "
         "locked_at = now() AT TIME ZONE 'UTC' WHERE topic = %s AND locked_by LIKE %s")
CLAIMED = "SELECT ids FROM relay_sessions WHERE topic = %s AND lock_token LIKE %s"
HAND_BACK = ("UPDATE kafka_topic_info SET locked_by = NULL, locked_at = NULL "
             "WHERE topic = %s AND locked_by = 'another-relay'")
DROP_LANE = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
             "WHERE datname = current_database() AND application_name = 'outbox-relay-drain'")
ANY_DRAIN = f"%{DRAIN_SUFFIX}"


def _backlog(stack: StackInfo, url: str, prefix: str, n: int) -> tuple[str, dict[int, Msg]]:
    """A topic of 3 partitions with `n` rows of every key shape, in transactions of 500."""
    big = unique(prefix)
    create_topics(stack.kafka_bootstrap, {big: 3})
    backlog = every_key_shape([big], n)
    ids = insert(url, [backlog[i:i + 500] for i in range(0, len(backlog), 500)])
    return big, dict(zip(ids, backlog, strict=True))


def _lane_config(make_config: ConfigFactory, big: str) -> Config:
    return make_config([big], relay={"batch_size": 150, "micro_batch_s": 60,
                                     "poll_interval_s": 0.05, "drain_lane": True})


def _all_arrived_in_order(stack: StackInfo, url: str, big: str,
                          written: dict[int, Msg]) -> None:
    assert query(url, LEFT, ([big],))[0][0] == 0
    got = consume(stack.kafka_bootstrap, [big], expect=len(written))
    assert {r.outbox_id for r in got} == set(written), "lost"
    inversions, spread, _ = order_report(written, got)
    assert (inversions, spread) == (0, 0)
    assert query(url, "SELECT count(*) FROM relay_sessions")[0][0] == 0


def _run(relay: Relay, available_now: bool, stop: StopSignal | None = None) -> RunResult:
    try:
        return run(relay, available_now, stop)
    finally:
        relay.close()


def test_a_connection_dropped_after_a_drain_round_gives_the_topic_back_at_once(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, spark: SparkSession,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """After each round the lane reads pg_stat_activity (make_way) on its own connection.
    The server drops that connection just before that read: the lane must log it, count
    it, give its topic back and go on, not die with the topic out of the main lane's reach
    until the body's deadline (micro_batch_s), the available-now body idling meanwhile."""
    big, written = _backlog(stack, migrated_url, "lane-drop", 3_000)
    micro_batch_s = 120
    config = make_config([big], relay={"batch_size": 150, "micro_batch_s": micro_batch_s,
                                       "poll_interval_s": 0.05, "drain_lane": True})
    relay = build_relay(config, spark)
    assert relay.drains, "the drain lanes are on"
    lane_db = relay.drains[0].db
    dropped: list[list[tuple[object, ...]]] = []
    at_fault: list[tuple[float, float]] = []  # (when, messages published until then)

    def published() -> float:
        return relay.metrics.registry.get_sample_value(
            "outbox_relay_messages_total", {"topic": big, "outcome": "published"}) or 0.0

    def dropped_before(db: Database) -> int:
        if db is lane_db and not dropped:  # once: the server ends the lane's backend
            dropped.append(query(migrated_url, DROP_LANE))
            at_fault.append((time.monotonic(), published()))
        return relays_polling(db)

    monkeypatch.setattr(batch, "relays_polling", dropped_before)
    caplog.set_level(logging.ERROR, logger="outbox_relay.stream.lanes")
    thread, results = run_in_thread(lambda: _run(relay, available_now=True))
    assert wait_for(lambda: bool(at_fault), 120, 0.05), "the lane never reached make_way"
    (fault_at, before), = at_fault
    # The topic's next round, in either lane: stranded, it waits for the body's deadline.
    assert wait_for(lambda: published() > before, micro_batch_s, 0.05)
    resumed_in = time.monotonic() - fault_at
    thread.join(300)

    assert dropped == [[(True,)]]
    assert resumed_in < micro_batch_s / 4, (
        f"the topic's next round came {resumed_in:.0f} s after the fault: it was stranded")
    assert results and results[0].exit_code == EXIT_OK
    failures = relay.metrics.registry.get_sample_value(
        "outbox_relay_lane_failures_total", {"lane": "drain", "kind": "database_lost"})
    assert failures == 1
    logged = [r.getMessage() for r in caplog.records if r.name == "outbox_relay.stream.lanes"]
    assert any("drain lane gave up its round (database_lost)" in m for m in logged), logged
    _all_arrived_in_order(stack, migrated_url, big, written)


def test_a_lock_lost_during_a_drain_round_loses_nothing_and_keeps_key_order(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, spark: SparkSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another relay takes the topic's lock while the drain lane holds it (as after an
    expiry): the lane must not delete what it claimed, and once the lock comes back the
    rest drains with every first appearance in key order. The lane's first write waits
    until the lock is taken: polled for instead, a claim in flight was missed on a
    loaded machine, where 3,000 rows drained between two polls."""
    big, written = _backlog(stack, migrated_url, "lane-lost", 3_000)
    writing, stolen = threading.Event(), threading.Event()
    deliver = Delivery.deliver

    def held_once(self: Delivery, batch_id: int, sessions: list[Claim]) -> Outcome:
        if threading.current_thread().name == LANE_THREAD and not writing.is_set():
            writing.set()
            stolen.wait(60)
        return deliver(self, batch_id, sessions)

    monkeypatch.setattr(Delivery, "deliver", held_once)
    relay = build_relay(_lane_config(make_config, big), spark)
    stop = StopSignal()
    thread, results = run_in_thread(lambda: _run(relay, available_now=False, stop=stop))
    try:
        assert writing.wait(120), "the drain lane never claimed"
        assert query(migrated_url, DRAIN_WRITES, (big, ANY_DRAIN))[0][0] > 0
        claimed = _steal(migrated_url, big)
        stolen.set()
        assert claimed, "the drain lane held no claim in its write"
        lost = "outbox_relay_lock_lost_total"
        assert wait_for(lambda: (relay.metrics.registry.get_sample_value(lost) or 0) > 0,
                        60, 0.05), "the relay never noticed the lost lock"
        left = {r[0] for r in query(migrated_url, "SELECT id FROM kafka_messages")}
        assert claimed <= left, "the lane deleted rows under a lock it had lost"
        assert _rowcount(migrated_url, HAND_BACK, (big,)) == 1
        assert wait_for(lambda: query(migrated_url, LEFT, ([big],))[0][0] == 0, 120, 0.1)
    finally:
        stop.request("test")
        thread.join(120)
    assert results and results[0].exit_code == EXIT_OK
    _all_arrived_in_order(stack, migrated_url, big, written)


def test_a_stop_during_a_drain_write_deletes_what_was_acknowledged_and_no_more(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, spark: SparkSession,
) -> None:
    big, written = _backlog(stack, migrated_url, "lane-stop", 3_000)
    config = _lane_config(make_config, big)
    stop = StopSignal()
    thread, results = run_in_thread(
        lambda: _run(build_relay(config, spark), available_now=True, stop=stop))
    try:
        assert wait_for(lambda: query(migrated_url, DRAIN_WRITES, (big, ANY_DRAIN))[0][0] > 0,
                        120, 0.01), "the drain lane never claimed"
    finally:
        stop.request("test")
        thread.join(120)
    assert not thread.is_alive()
    assert results and results[0].exit_code == EXIT_INTERRUPTED
    assert query(migrated_url, DRAIN_HOLDS, (big, "%"))[0][0] == 0, "a lock was kept"
    remaining = {r[0] for r in query(migrated_url, "SELECT id FROM kafka_messages")}
    assert remaining, "the stop came too late to cut the drain"
    gone = set(written) - remaining
    got = consume(stack.kafka_bootstrap, [big], expect=len(gone))
    assert gone <= {r.outbox_id for r in got}, "deleted but never acknowledged"
    # The rest drains after a restart, in key order over both runs.
    again = make_config([big], name="again", relay={"batch_size": 150, "poll_interval_s": 0.05})
    assert _run(build_relay(again, spark), available_now=True).exit_code == EXIT_OK
    _all_arrived_in_order(stack, migrated_url, big, written)


def _steal(url: str, big: str) -> set[int]:
    """Takes the topic's lock from the drain lane while it holds rows it claimed; returns
    their ids (empty, and nothing taken, when it held none)."""
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(STEAL, (big, ANY_DRAIN))
            stolen = cur.rowcount == 1
            cur.execute(CLAIMED, (big, ANY_DRAIN))
            claimed = {i for (ids,) in cur.fetchall() for i in ids} if stolen else set()
        if claimed:
            conn.commit()
        else:
            conn.rollback()
        return claimed
    finally:
        conn.close()


def _rowcount(url: str, sql: str, params: tuple[object, ...]) -> int:
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute(sql, params)
        count: int = cur.rowcount
    conn.close()
    return count

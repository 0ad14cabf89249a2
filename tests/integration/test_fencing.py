"""Fencing (issue 8, item 2.6): a relay whose lock lapsed, by the database's clock, claims,
parks and deletes nothing, and leaves the live owner's session alone; the heartbeat renews
over the whole batch body and reports a lost lock within one interval."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from pyspark.sql import SparkSession

from outbox_relay.config import Config
from outbox_relay.control.claims import TopicLimits
from outbox_relay.control.finish import finish
from outbox_relay.stack import StackInfo
from outbox_relay.stream.heartbeat import Heartbeat
from outbox_relay.stream.stats import RelayStats
from outbox_relay.stream.stop import StopSignal
from outbox_relay.wiring import build_relay, new_round
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import Msg, create_topics, insert, query, unique, wait_for
from tests.integration.parties import Party


@pytest.fixture
def topic() -> str:
    return unique("fence")


@pytest.fixture
def config(make_config: ConfigFactory, topic: str) -> Config:
    return make_config([topic])


def _outbox(url: str, topic: str, n: int = 3) -> list[int]:
    return insert(url, [[Msg(topic, f"k{i}".encode(), b"v") for i in range(n)]])


def _expire(url: str, topic: str, config: Config) -> None:
    """The lock's last renewal moves past the lock timeout, by the database's clock."""
    query(url, "UPDATE kafka_topic_info SET locked_at = locked_at - make_interval(secs => %s)"
               " WHERE topic = %s", (config.relay.lock_timeout_s + 1, topic))


def _count(url: str, table: str, topic: str) -> int:
    sql = {"messages": "SELECT count(*) FROM kafka_messages WHERE topic = %s",
           "sessions": "SELECT count(*) FROM relay_sessions WHERE topic = %s"}[table]
    return int(query(url, sql, (topic,))[0][0])


def test_a_claim_under_an_expired_lock_claims_nothing(
    migrated_url: str, config: Config, parties: tuple[Party, Party], topic: str
) -> None:
    a, _ = parties
    _outbox(migrated_url, topic)
    assert a.locks.acquire([topic]) == [topic]
    _expire(migrated_url, topic, config)
    sessions = a.claim(topic)
    print("sessions claimed under an expired lock:", sessions)
    assert sessions == []
    assert _count(migrated_url, "sessions", topic) == 0


def test_a_finish_under_an_expired_lock_deletes_nothing(
    migrated_url: str, config: Config, parties: tuple[Party, Party], topic: str
) -> None:
    a, _ = parties
    _outbox(migrated_url, topic)
    a.locks.acquire([topic])
    batch = a.claims.claim([TopicLimits(topic, 1_000_000, False)], 100, 10_000_000)
    assert len(batch.sessions) == 1
    _expire(migrated_url, topic, config)
    done = finish(a.claims, a.locks, [topic], batch.sessions, {})
    left = _count(migrated_url, "messages", topic)
    print(f"finish under an expired lock: published={done.published} left={left}")
    assert (done.published, done.owned, done.lost, left) == (0, set(), {topic}, 3)
    assert _count(migrated_url, "sessions", topic) == 0  # its own bookkeeping goes


def test_parking_under_an_expired_lock_moves_nothing(
    migrated_url: str, config: Config, parties: tuple[Party, Party], topic: str
) -> None:
    a, _ = parties
    ids = _outbox(migrated_url, topic)
    a.locks.acquire([topic])
    _expire(migrated_url, topic, config)
    parked = a.parking.park_one(ids[0], "refused by the broker", 1)
    print("parked under an expired lock:", parked)
    assert parked == []
    assert _count(migrated_url, "messages", topic) == 3


def test_a_lapsed_relay_leaves_the_live_owners_session(
    migrated_url: str, config: Config, parties: tuple[Party, Party], topic: str
) -> None:
    a, b = parties
    _outbox(migrated_url, topic)
    a.locks.acquire([topic])
    _expire(migrated_url, topic, config)
    assert b.locks.acquire([topic]) == [topic]  # b takes the lapsed lock over
    live = b.claim(topic)
    assert len(live) == 1
    a.claim(topic)  # a does not know yet that its lock lapsed
    kept = [str(r[0]) for r in query(migrated_url, "SELECT session_id FROM relay_sessions")]
    print("live owner's sessions after the lapsed relay's claim:", kept)
    assert kept == live


def test_a_dead_owners_old_session_is_cleared_and_a_young_one_kept(
    migrated_url: str, config: Config, parties: tuple[Party, Party], topic: str
) -> None:
    a, b = parties
    _outbox(migrated_url, topic)
    a.locks.acquire([topic])
    dead = a.claim(topic)
    _expire(migrated_url, topic, config)
    b.locks.acquire([topic])
    b.claim(topic)  # a's session is younger than the lock timeout: it stays
    sessions = [str(r[0]) for r in query(migrated_url, "SELECT session_id FROM relay_sessions")]
    assert dead[0] in sessions
    query(migrated_url, "UPDATE relay_sessions SET claimed_at = now() - make_interval(secs => %s)"
                        " WHERE session_id = %s", (config.relay.lock_timeout_s + 1, dead[0]))
    mine = b.claim(topic)
    left = sorted(str(r[0]) for r in query(migrated_url, "SELECT session_id FROM relay_sessions"))
    assert dead[0] not in left and set(mine) <= set(left)


@pytest.mark.parametrize("how", ["taken over", "expired"])
def test_the_heartbeat_reports_a_lost_lock_within_one_interval(
    migrated_url: str, config: Config, parties: tuple[Party, Party], topic: str, how: str
) -> None:
    a, _ = parties
    a.locks.acquire([topic])
    interval = 1.0
    reported: list[tuple[float, set[str]]] = []
    with Heartbeat(a.locks, [topic], interval, lambda: True,
                   on_lost=lambda t: reported.append((time.monotonic(), set(t)))):
        if how == "taken over":
            query(migrated_url, "UPDATE kafka_topic_info SET locked_by = 'thief',"
                                " locked_at = now() AT TIME ZONE 'UTC' WHERE topic = %s", (topic,))
        else:
            _expire(migrated_url, topic, config)
        lost_at = time.monotonic()
        assert wait_for(lambda: bool(reported), 10 * interval, 0.05)
    delay = reported[0][0] - lost_at
    print(f"lock {how}: on_lost after {delay:.2f}s with {reported[0][1]}")
    assert reported[0][1] == {topic}
    assert delay <= interval + 0.5  # one interval, plus the renewal's round trip


def _locked_at(url: str, topic: str) -> Any:
    return query(url, "SELECT locked_at FROM kafka_topic_info WHERE topic = %s", (topic,))[0][0]


def test_the_heartbeat_renews_while_the_batch_validates(
    stack: StackInfo, spark: SparkSession, migrated_url: str, config: Config, topic: str
) -> None:
    create_topics(stack.kafka_bootstrap, {topic: 1})
    _outbox(migrated_url, topic)
    relay = build_relay(config, spark)
    rounds = new_round(relay, StopSignal(), RelayStats(), lambda: None)
    validate = rounds._topics.validate
    renewed: list[bool] = []

    def slow_validate(locked: list[str], errors: dict[str, str]) -> Any:
        # The batch holds its lock here; a slow Kafka describe would look like this.
        first = _locked_at(migrated_url, topic)
        renewed.append(wait_for(lambda: _locked_at(migrated_url, topic) > first,
                                3 * config.relay.heartbeat_interval_s, 0.2))
        return validate(locked, errors)

    rounds._topics.validate = slow_validate  # type: ignore[method-assign]
    try:
        assert rounds.run([topic])
    finally:
        relay.close()
    print("lock renewed while validating:", renewed)
    assert renewed == [True]
    assert _count(migrated_url, "messages", topic) == 0


def test_a_lock_lost_before_the_claim_skips_the_claim(
    stack: StackInfo, spark: SparkSession, migrated_url: str, config: Config, topic: str
) -> None:
    create_topics(stack.kafka_bootstrap, {topic: 1})
    _outbox(migrated_url, topic)
    relay = build_relay(config, spark)
    rounds = new_round(relay, StopSignal(), RelayStats(), lambda: None)
    validate, claim = rounds._topics.validate, relay.claims.claim
    claimed: list[list[str]] = []
    lost = threading.Event()

    def stolen_while_validating(locked: list[str], errors: dict[str, str]) -> Any:
        query(migrated_url, "UPDATE kafka_topic_info SET locked_by = 'thief' WHERE topic = %s",
              (topic,))
        # The heartbeat must notice before the claim; the fenced claim refuses anyway.
        lost.wait(3 * config.relay.heartbeat_interval_s)
        return validate(locked, errors)

    def recording_claim(limits: list[TopicLimits], *args: Any) -> Any:
        claimed.append([t.topic for t in limits])
        return claim(limits, *args)

    lock_lost = rounds._delivery.lock_lost

    def noted(topics: set[str]) -> None:
        lock_lost(topics)
        lost.set()

    rounds._delivery.lock_lost = noted  # type: ignore[method-assign]
    rounds._topics.validate = stolen_while_validating  # type: ignore[method-assign]
    relay.claims.claim = recording_claim  # type: ignore[method-assign]
    try:
        assert rounds.run([topic])
    finally:
        relay.close()
    print("lost reported:", lost.is_set(), "claims made for:", claimed)
    assert lost.is_set()
    assert all(topic not in c for c in claimed)
    assert _count(migrated_url, "messages", topic) == 3

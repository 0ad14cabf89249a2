"""The rule of issue 52 on the real database: a lock whose holder is certainly gone is
taken over at once; everything else keeps the lock timeout (docs/design.md, invariant 3).

"Certainly gone": the token is registered in relay_lock_holders, since this server
started, and no backend holds its holder key any more (outbox_relay/schemas/0018). A relay's
liveness connection (outbox_relay.control.liveness) holds that key for the process's life.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from outbox_relay.config import Config
from outbox_relay.control import liveness
from outbox_relay.control.liveness import Liveness
from outbox_relay.control.pending import TopicFilter, pending_topics
from outbox_relay.observe.status import take_snapshot
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import Msg, insert, query, unique, wait_for
from tests.integration.parties import Party

# Deimos's own lock statement (KafkaTopicInfo.lock), with the database's clock for its
# `Time.zone.now` and `1.minute.ago`: what a Deimos producer sharing the table runs.
DEIMOS_LOCK = """
UPDATE kafka_topic_info
SET locked_by = %s, locked_at = now() AT TIME ZONE 'UTC', error = false
WHERE topic = %s AND ((locked_by IS NULL AND error = false)
                      OR locked_at < now() AT TIME ZONE 'UTC' - interval '1 minute')
"""


@pytest.fixture
def topic() -> str:
    return unique("holder")


@pytest.fixture
def config(make_config: ConfigFactory, topic: str) -> Config:
    # The shipped profile's lock timeout: a takeover here cannot be a timeout's.
    return make_config([topic], relay={"lock_timeout_s": 60, "heartbeat_interval_s": 10})


@pytest.fixture
def holders(config: Config) -> Iterator[list[Liveness]]:
    made: list[Liveness] = []
    yield made
    for h in made:
        h.close()


def _register(config: Config, holders: list[Liveness], *tokens: str,
              probe_interval_s: float = 3600.0) -> Liveness:
    """A registered holder; by default it does not reconnect within the test."""
    h = Liveness(config.postgres, list(tokens), probe_interval_s=probe_interval_s)
    holders.append(h)
    assert h.start(), "registered"
    return h


def _end_backend(url: str, pid: int | None) -> None:
    """The server drops the backend, as it does for a killed process's connections."""
    assert pid is not None
    query(url, "SELECT pg_terminate_backend(%s)", (pid,))
    assert wait_for(lambda: not query(url, "SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                                      (pid,)), 10, 0.02)


def _expire(url: str, topic: str) -> None:
    query(url, "UPDATE kafka_topic_info SET locked_at = locked_at - interval '61 seconds'"
               " WHERE topic = %s", (topic,))


@pytest.mark.parametrize("how", ["backend terminated", "connection closed"])
def test_a_registered_holder_whose_backend_ended_is_taken_over_at_once(
    migrated_url: str, config: Config, parties: tuple[Party, Party],
    holders: list[Liveness], topic: str, how: str,
) -> None:
    a, b = parties
    held = _register(config, holders, "relay-a")
    assert a.locks.acquire([topic]) == [topic]
    assert b.locks.acquire([topic]) == [], "alive: its lock is kept"
    if how == "backend terminated":
        _end_backend(migrated_url, held.backend_pid)
    else:
        held.close()
    taken = b.locks.acquire([topic])
    print(f"{how}: taken over at once with a 60 s lock timeout: {taken}")
    assert taken == [topic]


def test_a_live_registered_holder_keeps_its_lock_until_it_expires(
    migrated_url: str, config: Config, parties: tuple[Party, Party],
    holders: list[Liveness], topic: str,
) -> None:
    a, b = parties
    _register(config, holders, "relay-a")
    a.locks.acquire([topic])
    assert b.locks.acquire([topic]) == []
    # Alive but not renewing (a heartbeat that stopped): the timeout still applies.
    _expire(migrated_url, topic)
    assert b.locks.acquire([topic]) == [topic]


def test_an_unregistered_token_keeps_the_timeout_rule(
    migrated_url: str, parties: tuple[Party, Party], topic: str,
) -> None:
    a, b = parties  # a Deimos producer or an older relay: no liveness connection
    a.locks.acquire([topic])
    a.close()
    assert b.locks.acquire([topic]) == []
    _expire(migrated_url, topic)
    assert b.locks.acquire([topic]) == [topic]


def test_a_registration_from_another_server_run_proves_nothing(
    migrated_url: str, config: Config, parties: tuple[Party, Party],
    holders: list[Liveness], topic: str,
) -> None:
    """A server restart or a failover ends every backend, live holders' too: their keys
    are free until they reconnect, and nothing is taken over for that; the timeout
    applies."""
    a, b = parties
    held = _register(config, holders, "relay-a")
    a.locks.acquire([topic])
    _end_backend(migrated_url, held.backend_pid)
    query(migrated_url, "UPDATE relay_lock_holders SET server_started = "
                        "pg_postmaster_start_time() - interval '1 hour'")
    assert b.locks.acquire([topic]) == []
    _expire(migrated_url, topic)
    assert b.locks.acquire([topic]) == [topic]


def test_deimos_sees_and_respects_our_locks(
    migrated_url: str, config: Config, parties: tuple[Party, Party],
    holders: list[Liveness], topic: str,
) -> None:
    a, b = parties
    held = _register(config, holders, "relay-a")
    a.locks.acquire([topic])
    deimos = [query(migrated_url, DEIMOS_LOCK + " RETURNING topic", ("deimos-uuid", topic))]
    _end_backend(migrated_url, held.backend_pid)
    # Deimos knows only its minute: a gone holder's fresh lock stays, for it, too.
    deimos.append(query(migrated_url, DEIMOS_LOCK + " RETURNING topic", ("deimos-uuid", topic)))
    assert b.locks.acquire([topic]) == [topic]
    deimos.append(query(migrated_url, DEIMOS_LOCK + " RETURNING topic", ("deimos-uuid", topic)))
    owner = query(migrated_url, "SELECT locked_by FROM kafka_topic_info WHERE topic = %s",
                  (topic,))[0][0]
    print("Deimos's lock statement: live holder, gone holder, after our takeover:", deimos)
    assert deimos == [[], [], []]
    assert owner == "relay-b"


def test_a_gone_holders_session_is_stale_and_its_lock_shown_as_such(
    migrated_url: str, config: Config, parties: tuple[Party, Party],
    holders: list[Liveness], topic: str,
) -> None:
    a, b = parties
    insert(migrated_url, [[Msg(topic, b"k", b"v")]])
    held = _register(config, holders, "relay-a")
    a.locks.acquire([topic])
    dead = a.claim(topic)
    _end_backend(migrated_url, held.backend_pid)
    states = pending_topics(a.db, 60, TopicFilter([".*"], []))
    snapshot = take_snapshot(a.db, 60, str(config.ledger.path), with_rates=False)
    lock = next(t.lock for t in snapshot.topics if t.topic == topic)
    assert [s.state for s in states if s.topic == topic] == ["ready"]
    assert lock is not None and not lock.alive and lock.holder_gone
    b.locks.acquire([topic])
    mine = b.claim(topic)  # clears the gone holder's young session first
    left = [str(r[0]) for r in query(migrated_url, "SELECT session_id FROM relay_sessions")]
    assert left == mine and dead[0] not in left


def test_the_registry_forgets_gone_holders_that_hold_nothing(
    migrated_url: str, config: Config, parties: tuple[Party, Party],
    holders: list[Liveness], topic: str,
) -> None:
    a, _ = parties
    idle = _register(config, holders, "relay-idle")
    idle.close()  # holds nothing: forgotten at once
    locking = _register(config, holders, "relay-a", "relay-a/drain")
    a.locks.acquire([topic])
    _end_backend(migrated_url, locking.backend_pid)
    _register(config, holders, "relay-next")  # registering prunes the gone ones
    tokens = sorted(r[0] for r in query(migrated_url, "SELECT lock_token FROM relay_lock_holders"))
    # relay-a still holds a lock: its row stays until the lock passes (then it is takeable
    # at once); its drain lane holds nothing and goes.
    assert tokens == ["relay-a", "relay-next"]


def test_a_dropped_liveness_connection_comes_back_under_its_key(
    migrated_url: str, config: Config, parties: tuple[Party, Party],
    holders: list[Liveness], topic: str,
) -> None:
    a, b = parties
    held = _register(config, holders, "relay-a", probe_interval_s=0.1)
    key, first = held.key, held.backend_pid
    a.locks.acquire([topic])
    _end_backend(migrated_url, first)
    assert wait_for(lambda: held.backend_pid not in (None, first), 10, 0.05)
    assert held.key == key
    # Back: nobody took the lock meanwhile, and it is kept again.
    assert b.locks.acquire([topic]) == []


def test_a_relay_that_cannot_hold_its_key_stays_unregistered_under_the_timeout(
    migrated_url: str, config: Config, parties: tuple[Party, Party],
    holders: list[Liveness], topic: str, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A pooler in statement mode refuses the transaction that holds the key: the relay
    says so and runs unregistered, so its locks are never taken over early."""
    a, b = parties
    monkeypatch.setattr(liveness, "TAKE_KEY", "SELECT * FROM refused_as_a_pooler_would")
    h = Liveness(config.postgres, ["relay-a"], probe_interval_s=3600)
    holders.append(h)
    assert not h.start()
    assert "liveness: not registered" in caplog.text
    assert query(migrated_url, "SELECT count(*) FROM relay_lock_holders")[0][0] == 0
    a.locks.acquire([topic])
    a.close()
    assert b.locks.acquire([topic]) == []
    _expire(migrated_url, topic)
    assert b.locks.acquire([topic]) == [topic]

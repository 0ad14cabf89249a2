"""The relay as a real spark-submit process: crashes and signals lose nothing."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg2
import pytest

from outbox_relay.app import print_summary
from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_INTERRUPTED, EXIT_OK
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
from tests.integration.process import (
    LAUNCH_PATHS,
    kill_group,
    launch_env,
    signal_group,
    spark_submit,
    write_profile,
)
from tests.lanes import LANES, on_lane

pytestmark = pytest.mark.integration


def _outbox(url: str, topics: list[str], n: int) -> list[int]:
    return insert(url, [[Msg(topics[i % len(topics)], f"k{i % 17}".encode(), f"v{i}".encode())
                         for i in range(j, min(n, j + 50))] for j in range(0, n, 50)])


@pytest.mark.parametrize("lane", LANES)
def test_crash_between_ack_and_delete_resends_at_most_that_session(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    tmp_path: Path, lane: str,
) -> None:
    topics = [unique("crash-a"), unique("crash-b")]
    create_topics(stack.kafka_bootstrap, {t: 2 for t in topics})
    ids = _outbox(migrated_url, topics, 1000)
    # The crashed process's locks pass at once: its liveness connection died with it
    # (issue 52); before, the restart waited out lock_timeout_s.
    config = on_lane(make_config(topics, relay={"batch_size": 150, "lock_timeout_s": 6,
                                                "available_now_deadline_s": 40}), lane)
    profile = write_profile(config, tmp_path / "relay.toml")

    crashed = spark_submit(profile, "--available-now", env={"RELAY_FAILPOINTS": "after_ack"},
                           log=tmp_path / "crashed.log")
    assert crashed.wait(timeout=240) == -signal.SIGKILL
    in_flight = {i for (ids_,) in query(migrated_url, "SELECT ids FROM relay_sessions")
                 for i in ids_}
    assert 0 < len(in_flight) <= 2 * 150
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0] == len(ids)

    result = run_relay(config)

    assert result.exit_code == EXIT_OK
    got = Counter(r.outbox_id for r in consume(stack.kafka_bootstrap, topics, expect=len(ids)))
    assert set(got) == set(ids), "a message was lost"
    duplicated = {i for i, n in got.items() if n > 1}
    assert duplicated <= in_flight, "duplicates only from the session in flight at the crash"
    assert all(n <= 2 for n in got.values())
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0] == 0


SESSIONS = "SELECT session_id, ids FROM relay_sessions ORDER BY session_id"
DELETE_WAITING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'
  AND query LIKE '%%DELETE FROM kafka_messages%%'
"""


def test_sigterm_in_continuous_mode_finishes_the_batch_and_exits_zero(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, tmp_path: Path
) -> None:
    import psycopg2

    topics = [unique("term")]
    create_topics(stack.kafka_bootstrap, {topics[0]: 2})
    ids = _outbox(migrated_url, topics, 3000)
    config = make_config(topics, relay={"batch_size": 100})
    # A row lock on the first message holds the first batch's delete (its finish) until
    # this test lets go: the signal provably lands between that batch's claim and its end.
    holder = psycopg2.connect(migrated_url)
    holder.cursor().execute("SELECT id FROM kafka_messages WHERE id = %s FOR UPDATE", (ids[0],))
    proc = spark_submit(write_profile(config, tmp_path / "relay.toml"), log=tmp_path / "term.log")
    log = lambda: (tmp_path / "term.log").read_text()[-3000:]  # noqa: E731
    try:
        assert wait_for(lambda: bool(query(migrated_url, SESSIONS)), 300, interval_s=0.05), log()
        sessions = query(migrated_url, SESSIONS)
        signal_group(proc, signal.SIGTERM)
        assert query(migrated_url, SESSIONS) == sessions, "no batch in flight at the signal"
        # The batch goes on after the signal, up to its delete waiting for the row lock.
        assert wait_for(lambda: query(migrated_url, DELETE_WAITING)[0][0] > 0, 120,
                        interval_s=0.1), log()
        holder.rollback()
        assert proc.wait(timeout=180) == EXIT_OK, log()
    finally:
        holder.close()
        kill_group(proc)
    session_ids = {i for _, ids_ in sessions for i in ids_}
    assert ids[0] in session_ids
    left = {i for (i,) in query(migrated_url, "SELECT id FROM kafka_messages")}
    assert not session_ids & left, "the batch in flight at the signal was not deleted"
    delivered = set(ids) - left
    got = Counter(r.outbox_id for r in consume(stack.kafka_bootstrap, topics,
                                               expect=len(delivered)))
    assert session_ids <= set(got), "the batch in flight at the signal was not delivered"
    assert set(got) == delivered and max(got.values()) == 1, "sent exactly what was deleted"
    assert query(migrated_url, "SELECT count(*) FROM relay_sessions")[0][0] == 0
    assert query(migrated_url, "SELECT count(*) FROM kafka_topic_info "
                 "WHERE locked_by IS NOT NULL")[0][0] == 0


def test_sigterm_interrupting_a_drain_exits_non_zero_and_loses_nothing(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    tmp_path: Path,
) -> None:
    topics = [unique("drain")]
    create_topics(stack.kafka_bootstrap, {topics[0]: 1})
    ids = _outbox(migrated_url, topics, 3000)
    config = make_config(topics, relay={"batch_size": 50})
    proc = spark_submit(write_profile(config, tmp_path / "relay.toml"), "--available-now",
                        log=tmp_path / "drain.log")
    try:
        remaining = lambda: query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0]  # noqa: E731
        assert wait_for(lambda: remaining() < len(ids), 240)
        signal_group(proc, signal.SIGTERM)
        assert proc.wait(timeout=90) == EXIT_INTERRUPTED
    finally:
        kill_group(proc)
    left = query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0]
    assert left > 0
    assert query(migrated_url, "SELECT count(*) FROM relay_sessions")[0][0] == 0
    drain_rest = config.model_copy(
        update={"relay": config.relay.model_copy(update={"batch_size": 10_000})})
    assert run_relay(drain_rest).exit_code == EXIT_OK
    got = Counter(r.outbox_id for r in consume(stack.kafka_bootstrap, topics, expect=len(ids)))
    assert set(got) == set(ids)
    assert max(got.values()) == 1, "a graceful stop re-sends nothing"


# Another relay's fresh lock: an available-now drain waits for it until its deadline.
LOCK_ELSEWHERE = """
INSERT INTO kafka_topic_info (topic, locked_by, locked_at)
VALUES (%s, 'another-relay', now() AT TIME ZONE 'UTC')
ON CONFLICT (topic) DO UPDATE SET locked_by = excluded.locked_by, locked_at = excluded.locked_at
"""
RELEASE_ELSEWHERE = "UPDATE kafka_topic_info SET locked_by = NULL, locked_at = NULL"
SOURCE_CONNECTED = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = %s AND application_name = 'outbox-relay-source'
"""
DENY_CONNECTIONS = 'ALTER DATABASE "{}" ALLOW_CONNECTIONS false'  # a generated name
ALLOW_CONNECTIONS = 'ALTER DATABASE "{}" ALLOW_CONNECTIONS true'
TERMINATE_BACKENDS = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = %s AND pid <> pg_backend_pid()
"""


@contextmanager
def unreachable(stack: StackInfo, url: str) -> Iterator[None]:
    """The test's own database refuses connections and drops those it had; the shared
    server and the other tests' databases are untouched."""
    name = url.rpartition("/")[2]
    admin = psycopg2.connect(stack.postgres_url)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(DENY_CONNECTIONS.format(name))
            cur.execute(TERMINATE_BACKENDS, (name,))
        yield
    finally:
        with admin.cursor() as cur:
            cur.execute(ALLOW_CONNECTIONS.format(name))
        admin.close()


def _drain_waiting_for_a_lock(stack: StackInfo, url: str, make_config: ConfigFactory,
                              run_relay: RelayRunner, deadline_s: float) -> Iterator[object]:
    topics = [unique("unverified")]
    create_topics(stack.kafka_bootstrap, {topics[0]: 1})
    ids = _outbox(url, topics, 20)
    query(url, LOCK_ELSEWHERE, (topics[0],))
    config = make_config(topics, relay={"available_now_deadline_s": deadline_s,
                                        "lock_timeout_s": 120})
    thread, results = run_in_thread(lambda: run_relay(config))
    name = url.rpartition("/")[2]
    assert wait_for(lambda: query(url, SOURCE_CONNECTED, (name,))[0][0] > 0, 240), \
        "the streaming source never polled"
    yield thread, results, topics, ids


def test_available_now_exits_not_verified_when_postgres_is_gone_at_the_end(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    capsys: pytest.CaptureFixture[str],
) -> None:
    deadline_s = 12.0
    thread, results, _, _ = next(_drain_waiting_for_a_lock(
        stack, migrated_url, make_config, run_relay, deadline_s))
    with unreachable(stack, migrated_url):
        thread.join(timeout=180)
        assert not thread.is_alive()
    result = results[0]
    print_summary(result)
    out = capsys.readouterr().out
    print(f"exit {result.exit_code} after {result.seconds:.1f} s")
    assert result.exit_code == ExitCode.NOT_VERIFIED, out
    assert "drain not verified: PostgreSQL" in out, out
    assert result.seconds >= deadline_s * 0.8, "a failed poll ended the drain early"


def test_a_failed_poll_does_not_end_the_drain_before_its_deadline(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
) -> None:
    thread, results, topics, ids = next(_drain_waiting_for_a_lock(
        stack, migrated_url, make_config, run_relay, 60.0))
    with unreachable(stack, migrated_url):
        # An assertion window, not a synchronisation: the drain must still be waiting.
        thread.join(timeout=5)
        assert thread.is_alive(), f"the drain ended on a failed poll: {results}"
    query(migrated_url, RELEASE_ELSEWHERE)
    thread.join(timeout=180)
    assert not thread.is_alive()
    assert results[0].exit_code == EXIT_OK
    got = consume(stack.kafka_bootstrap, topics, expect=len(ids))
    assert sorted(r.outbox_id for r in got) == sorted(ids)
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0] == 0


SET_CREATED_AT = "UPDATE kafka_messages SET created_at = %s::timestamp WHERE id = %s"
CREATED_AT_TEXT = """
SELECT id, to_char(created_at, 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') FROM kafka_messages
"""
# Wall clocks that a JVM in New York gets wrong in other ways: one in the spring-forward
# gap (02:30 does not exist there), one in the repeated autumn hour, one on a whole second.
AWKWARD_CREATED_AT = ("2026-03-08 02:30:00.5", "2026-11-01 01:30:00.123456",
                      "2026-07-01 12:00:00")


@pytest.mark.parametrize("launch", LAUNCH_PATHS)
def test_created_at_header_is_the_rows_created_at_whatever_the_jvm_time_zone(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, tmp_path: Path,
    launch: str,
) -> None:
    topics = [unique("created-at")]
    create_topics(stack.kafka_bootstrap, {topics[0]: 1})
    ids = _outbox(migrated_url, topics, 6)
    for i, created_at in zip(ids, AWKWARD_CREATED_AT, strict=False):
        query(migrated_url, SET_CREATED_AT, (created_at, i))
    expected = dict(query(migrated_url, CREATED_AT_TEXT))
    config = make_config(topics)
    log = tmp_path / "relay.log"
    proc = spark_submit(write_profile(config, tmp_path / "relay.toml"), "--available-now",
                        env={"TZ": "America/New_York", **launch_env(launch, tmp_path)},
                        log=log)
    try:
        assert proc.wait(timeout=400) == EXIT_OK, log.read_text()[-3000:]
    finally:
        kill_group(proc)
    text = log.read_text()
    # Nothing of package resolution on either path; only first use runs a second submit.
    assert ":: resolving dependencies ::" not in text and "ivy" not in text.lower()
    assert ("running it once more" in text) == (launch == "first-use"), text[-3000:]
    got = {r.outbox_id: r.headers["outbox-relay.created-at"].decode()
           for r in consume(stack.kafka_bootstrap, topics, expect=len(ids))}
    print({i: (expected[i], got.get(i)) for i in ids})
    assert got == expected

"""`outbox-relay skip` and `parked drop`, through the command line, on the real database.

Skipped rows leave the outbox and the ledger says `skipped`, by whom and when, in staging
and after a copy in Delta. A skip that could race a relay (a live topic lock, an id in a
live session) changes nothing. A dropped parked message is recorded as `dropped`.
"""

from __future__ import annotations

import datetime as dt
import getpass
import random
import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from outbox_relay.cli import main
from outbox_relay.config import Config
from outbox_relay.control import skipping
from outbox_relay.control.claims import TopicLimits
from outbox_relay.control.db import Database
from outbox_relay.exit_codes import ExitCode
from outbox_relay.ledger.delta import Ledger
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner, run_in_thread
from tests.integration.helpers import Msg, consume, create_topics, insert, query, unique
from tests.integration.parties import Party
from tests.integration.process import write_profile

pytestmark = pytest.mark.integration

STAGED = """
SELECT outcome, ids, actor, source, relayed_at FROM relay_ledger_staging
WHERE outcome IN ('skipped', 'dropped') ORDER BY seq
"""

# The five ids just past the next round's claim (batch_size 50).
NEXT_ROUND = "SELECT id FROM kafka_messages WHERE topic = %s ORDER BY id OFFSET 50 LIMIT 5"


@pytest.fixture
def topic() -> str:
    return unique("skip")


@pytest.fixture
def config(make_config: ConfigFactory, topic: str) -> Config:
    return make_config([topic])


@pytest.fixture
def profile(config: Config, tmp_path: Path) -> str:
    return str(write_profile(config, tmp_path / "relay.toml"))


def cli(profile: str, *argv: object) -> int:
    return main(["--config", profile, *map(str, argv)])


def outbox_ids(url: str) -> list[int]:
    return [r[0] for r in query(url, "SELECT id FROM kafka_messages ORDER BY id")]


def staged(url: str) -> list[tuple[Any, ...]]:
    return query(url, STAGED)


def expected_actor() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def test_skip_removes_the_rows_and_the_ledger_names_who_and_when(
    spark: SparkSession, config: Config, profile: str, migrated_url: str, topic: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ids = insert(migrated_url, [[Msg(topic, b"k1", b"a"), Msg(topic, b"k1", b"b")],
                                [Msg(topic, None, b"", partition_key="p")]])
    before = query(migrated_url, "SELECT now()")[0][0]
    code = cli(profile, "skip", ids[0], ids[2], 10**12, "--yes")
    after = query(migrated_url, "SELECT now()")[0][0]
    out = capsys.readouterr()
    print(out.out, out.err)

    # One id did not exist: the others are skipped, the missing one named, exit NOT_FOUND.
    assert code == ExitCode.NOT_FOUND
    assert str(10**12) in out.err and "not in the outbox" in out.err
    assert outbox_ids(migrated_url) == [ids[1]]
    [(outcome, skipped, actor, source, at)] = staged(migrated_url)
    assert (outcome, sorted(skipped), actor, source) == (
        "skipped", [ids[0], ids[2]], expected_actor(), config.relay.source_name)
    assert before <= at <= after

    # Only missing ids: nothing happens, NOT_FOUND; a skip of what is left works.
    assert cli(profile, "skip", ids[0], "--yes") == ExitCode.NOT_FOUND
    assert cli(profile, "skip", ids[1], "--yes") == ExitCode.OK
    assert outbox_ids(migrated_url) == []

    ledger = Ledger(spark, config, Database(config.postgres, "test-ledger"))
    ledger.flush()
    rows = (ledger.table().where(F.col("outcome") == "skipped")
            .select("message_id", "actor", "relayed_at", "kafka_partition").collect())
    assert sorted(r.message_id for r in rows) == ids
    assert {r.actor for r in rows} == {expected_actor()}
    assert all(r.kafka_partition is None for r in rows)
    entry = ledger.lookup(topic, ids[2])
    assert [(e.outcome, e.actor, e.where) for e in entry] == [
        ("skipped", expected_actor(), "delta")]
    assert staged(migrated_url) == []


def test_skip_refuses_what_a_relay_is_working_on_and_changes_nothing(
    config: Config, profile: str, migrated_url: str, topic: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ids = insert(migrated_url, [[Msg(topic, b"k", str(i).encode()) for i in range(4)]])
    relay = Party(config, "relay-a")
    try:
        assert relay.locks.acquire([topic]) == [topic]
        batch = relay.claims.claim([TopicLimits(topic, 10**6, False)], 2, 10**9)
        assert [c.rows for c in batch.sessions] == [2]  # ids[0] and ids[1] in a live session

        # The lock is alive: even an id in no session could be claimed while we skip.
        for wanted in ([ids[0]], [ids[3]]):
            assert cli(profile, "skip", *wanted, "--yes") == ExitCode.BUSY
            err = capsys.readouterr().err
            print(err)
            assert "nothing skipped" in err and "relay-a" in err and topic in err
        # The lock is released, but the session is younger than the lock timeout: live.
        relay.locks.release([topic])
        assert cli(profile, "skip", ids[3], ids[1], "--yes") == ExitCode.BUSY
        err = capsys.readouterr().err
        assert f"message {ids[1]} is in a live session of relay-a" in err
        assert outbox_ids(migrated_url) == ids and staged(migrated_url) == []

        # Once the session is gone and nobody holds the lock, the skip goes through; with
        # --wait-s it waits for a lock released meanwhile.
        relay.claims.abandon([c.session_id for c in batch.sessions if c.session_id])
        assert relay.locks.acquire([topic]) == [topic]
        timer = threading.Timer(1.0, relay.locks.release, ([topic],))
        timer.start()
        assert cli(profile, "skip", ids[3], "--yes", "--wait-s", 30) == ExitCode.OK
        timer.join()
    finally:
        relay.close()
    assert outbox_ids(migrated_url) == ids[:3]
    assert [(o, list(i)) for o, i, *_ in staged(migrated_url)] == [("skipped", [ids[3]])]


def test_skip_without_a_terminal_asks_for_yes_and_names_parked_ids(
    config: Config, profile: str, migrated_url: str, topic: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ids = insert(migrated_url, [[Msg(topic, b"k", b"v"), Msg(topic, b"j", b"w")]])
    assert cli(profile, "skip", ids[0]) == ExitCode.DECLINED  # pytest's stdin is no terminal
    assert outbox_ids(migrated_url) == ids
    relay = Party(config, "relay-p")
    try:
        relay.locks.acquire([topic])
        relay.parking.park_one(ids[1], "refused by the broker", 1)
        relay.locks.release([topic])
    finally:
        relay.close()
    capsys.readouterr()
    assert cli(profile, "skip", ids[1], "--yes") == ExitCode.NOT_FOUND
    assert "parked" in capsys.readouterr().err


def test_parked_drop_is_recorded_in_the_ledger_as_dropped(
    spark: SparkSession, config: Config, profile: str, migrated_url: str, topic: str,
) -> None:
    ids = insert(migrated_url, [[Msg(topic, b"k", b"poison"), Msg(topic, b"k", b"after")]])
    relay = Party(config, "relay-d")
    try:
        relay.locks.acquire([topic])
        for i in ids:
            relay.parking.park_one(i, "refused by the broker", 1)
        relay.locks.release([topic])
    finally:
        relay.close()
    before = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    assert cli(profile, "parked", "drop", ids[0], "--yes") == ExitCode.OK

    assert [r[0] for r in query(migrated_url, "SELECT id FROM relay_parked_messages")] == ids[1:]
    [(outcome, dropped, actor, _, at)] = staged(migrated_url)
    assert (outcome, list(dropped), actor) == ("dropped", [ids[0]], expected_actor())
    assert at >= before
    ledger = Ledger(spark, config, Database(config.postgres, "test-ledger"))
    ledger.flush()
    assert {(e.outcome, e.actor) for e in ledger.lookup(topic, ids[0])} == {
        ("parked", None), ("dropped", expected_actor())}


def test_skips_between_a_draining_relays_rounds_never_race_its_sends(
    stack: StackInfo, spark: SparkSession, make_config: ConfigFactory, run_relay: RelayRunner,
    migrated_url: str, topic: str,
) -> None:
    """While a relay drains the topic in small rounds, skips are tried without pause, of
    ids at the tail and of ids the next round is about to claim: each is refused while a
    round holds the lock, or goes through between rounds. Every message then ends exactly
    one way: in Kafka and `published`, or not in Kafka and `skipped`."""
    create_topics(stack.kafka_bootstrap, {topic: 3})
    ids = insert(migrated_url, [[Msg(topic, f"k{i % 40}".encode(), f"v{i}".encode())
                                 for i in range(1_000)]])
    config = make_config([topic], relay={"batch_size": 50})
    thread, results = run_in_thread(lambda: run_relay(config))
    db = Database(config.postgres, "test-skipper")
    tail = [ids[-5 * (n + 1):len(ids) - 5 * n] for n in range(10)]
    skipped: list[int] = []
    refused = skipped_mid_drain = 0
    try:
        while (tail or skipped_mid_drain < 20 or not refused) and thread.is_alive():
            # Alternately the tail, and the ids just past the round being sent.
            wanted = tail[0] if tail and len(skipped) % 10 == 0 else [
                r[0] for r in query(migrated_url, NEXT_ROUND, (topic,))]
            result = skipping.skip(db, wanted, source="test", actor="tester@test",
                                   lock_timeout_s=config.relay.lock_timeout_s)
            if result.busy:
                refused += 1
                time.sleep(0.005)  # a round's finish and the next lock are milliseconds apart
                continue
            skipped += result.skipped
            skipped_mid_drain += bool(result.skipped) and thread.is_alive()
            if tail and wanted == tail[0]:
                tail.pop(0)
            # A skip holds the topic's row, and the relay's lock statement passes over a
            # row another transaction holds rather than wait for it (LOCK_TOPICS): skips
            # back to back would keep the rounds from the lock, and nothing would race.
            time.sleep(random.uniform(0, 0.05))
    finally:
        db.close()
    thread.join(600)
    assert results and results[0].exit_code == EXIT_OK
    print(f"{len(skipped)} skipped ({skipped_mid_drain} skips mid-drain), {refused} refused")
    assert skipped_mid_drain > 0 and refused > 0, "the skips met the relay's rounds"

    got = consume(stack.kafka_bootstrap, [topic], expect=len(ids) - len(skipped))
    sent = {r.outbox_id for r in got}
    assert not sent & set(skipped), "a skipped message was sent"
    assert sent | set(skipped) == set(ids)
    ledger = Ledger(spark, config, Database(config.postgres, "test-ledger"))
    ledger.flush()
    outcomes = Counter((r.message_id, r.outcome) for r in
                       ledger.table().select("message_id", "outcome").collect())
    assert outcomes == Counter({(i, "skipped" if i in set(skipped) else "published"): 1
                                for i in ids})

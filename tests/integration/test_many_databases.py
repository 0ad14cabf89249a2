"""One relay for several outbox databases, on the real stack: databases of the stack's
PostgreSQL, each with every key shape, two topics all of them publish to and one of its
own. A consumer reads back what Kafka holds: each record names its database in its source
header, every id of every database arrives, in per-key order within its database, and
each database's ledger accounts for its ids."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
from pyspark.sql import SparkSession

from outbox_relay.cli import main as cli_main
from outbox_relay.config import Config
from outbox_relay.config.load import build_config
from outbox_relay.exit_codes import ExitCode
from outbox_relay.launch.session import SparkSource
from outbox_relay.stack import StackInfo
from outbox_relay.stream.many import ManyResult, run_many
from outbox_relay.stream.stop import StopSignal
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    every_key_shape,
    insert,
    query,
    unique,
    wait_for,
)
from tests.integration.many import (
    Databases,
    check_delivery,
    migrate_url,
    profile_data,
)
from tests.integration.process import write_raw_profile

pytestmark = pytest.mark.integration


def _migrate(profile: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli_main(["--config", str(profile), "migrate"]) == ExitCode.OK
    return capsys.readouterr().out


def _written(entries: list[tuple[str, str]], shared: list[str], per_topic: int
             ) -> dict[str, dict[int, Msg]]:
    """Every database: every key shape on the shared topics and on one of its own."""
    written: dict[str, dict[int, Msg]] = {}
    for i, (name, url) in enumerate(entries):
        msgs = every_key_shape([*shared, f"{shared[0]}.own{i}"], per_topic)
        ids = insert(url, [msgs[j:j + 50] for j in range(0, len(msgs), 50)])
        written[name] = dict(zip(ids, msgs, strict=True))
    return written


def _run(config: Config, spark: SparkSession, available_now: bool,
         stop: StopSignal | None = None) -> ManyResult:
    return run_many(config, available_now, stop or StopSignal(), SparkSource.of(spark))


@pytest.mark.parametrize("available_now", [True, False], ids=["drain", "continuous"])
def test_one_relay_relays_eight_databases_each_in_key_order_and_each_ledger_holds_its_ids(
    stack: StackInfo, databases: Databases, spark: SparkSession, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], available_now: bool,
) -> None:
    entries = databases(8)
    shared = [unique("many"), unique("many")]
    own = [f"{shared[0]}.own{i}" for i in range(len(entries))]
    create_topics(stack.kafka_bootstrap, {**dict.fromkeys(shared, 3), **dict.fromkeys(own, 2)})
    # Until the session is up the driver's producer takes one row per topic and round,
    # then the claims of more are Spark's: both lanes carry the databases' records.
    data = profile_data(stack, tmp_path, entries, [*shared, *own], direct_max_rows=1)
    profile = write_raw_profile(data, tmp_path / "many.toml")
    migrated = _migrate(profile, capsys)
    assert [ln.split(":")[0] for ln in migrated.splitlines()] == [
        f"database {name}" for name, _ in entries]
    written = _written(entries, shared, 60)
    config = build_config(data, env={})

    result = (_run(config, spark, available_now=True) if available_now
              else _run_until_delivered(config, spark, [url for _, url in entries]))

    total = sum(len(m) for m in written.values())
    got = consume(stack.kafka_bootstrap, [*shared, *own], expect=total, timeout_s=60)
    lanes = Counter()
    for outcome in result.outcomes:
        assert outcome.result is not None, outcome.error
        lanes.update(outcome.result.stats.lanes)
    print(f"exit {result.exit_code} after {result.seconds:.1f} s; {len(got)} records of "
          f"{total}; lanes {dict(lanes)}")
    assert result.exit_code == ExitCode.OK
    assert lanes["direct"] > 0 and lanes["spark"] > 0
    assert len(got) == total  # nothing twice: a drain without faults sends each once
    check_delivery(written, got)
    for name, url in entries:
        assert query(url, "SELECT count(*) FROM kafka_messages") == [(0,)]
        ledger = Counter(r.message_id for r in spark.read.format("delta")
                         .load(str(tmp_path / "ledger" / name)).select("message_id").collect())
        assert ledger == Counter(list(written[name])), name


@contextlib.contextmanager
def _continuous(config: Config, spark: SparkSession, join_s: float = 60.0
                ) -> Iterator[list[ManyResult]]:
    """A continuous relay in a thread for the block, stopped and waited for (up to
    `join_s`) at its end; the list holds its result once it ended."""
    stop = StopSignal()
    results: list[ManyResult] = []
    runner = threading.Thread(target=lambda: results.append(_run(config, spark, False, stop)),
                              daemon=True)
    runner.start()
    try:
        yield results
    finally:
        stop.request("the test's end")
        runner.join(join_s)


def _run_until_delivered(config: Config, spark: SparkSession, urls: list[str]) -> ManyResult:
    """A continuous relay, stopped once every outbox is empty and every ledger record is
    copied to Delta (a stop leaves staged records for the next copy)."""
    with _continuous(config, spark, join_s=120) as results:
        assert wait_for(lambda: all(
            query(url, "SELECT (SELECT count(*) FROM kafka_messages) "
                       "+ (SELECT count(*) FROM relay_ledger_staging)") == [(0,)]
            for url in urls), 180, 0.2), "the continuous relay left rows or staged records"
    assert results, "the continuous relay did not end after its stop"
    return results[0]


def test_status_shows_every_database_and_a_verb_acts_on_the_one_named(
    stack: StackInfo, databases: Databases, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    entries = databases(2)
    topic = unique("many")
    profile = write_raw_profile(profile_data(stack, tmp_path, entries, [topic]),
                           tmp_path / "many.toml")
    _migrate(profile, capsys)
    insert(entries[1][1], [[Msg(topic, b"k", b"v")]])

    assert cli_main(["--config", str(profile), "status"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert [ln for ln in out.splitlines() if ln.startswith("database ")] == [
        "database db-0", "database db-1"]
    # The one it names: db-1 holds the message, db-0 nothing.
    for name, rows in (("db-1", 1), ("db-0", 0)):
        assert cli_main(["--config", str(profile), "--database", name,
                         "peek", "--topic", topic]) == ExitCode.OK
        assert len([ln for ln in capsys.readouterr().out.splitlines() if "key='k'" in ln]) \
            == rows
    assert cli_main(["--config", str(profile), "topics"]) == ExitCode.USAGE
    assert "choose one with --database NAME" in capsys.readouterr().err
    assert cli_main(["--config", str(profile), "--database", "nope", "topics"]) == ExitCode.USAGE


def test_a_continuous_relay_relays_the_others_while_one_database_is_missing_and_takes_it_up(
    stack: StackInfo, databases: Databases, spark: SparkSession, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A database that does not exist yet at the start (as one being restored): the others
    deliver meanwhile, and once it exists and is migrated, its messages follow."""
    entries = databases(2)
    late_name = f"m_{uuid.uuid4().hex[:10]}"
    late_url = entries[0][1].rpartition("/")[0] + "/" + late_name
    topic = unique("many")
    create_topics(stack.kafka_bootstrap, {topic: 3})
    everyone = [*entries, ("late", late_url)]
    data = profile_data(stack, tmp_path, everyone, [topic])
    config = build_config(data, env={})
    for _, url in entries:
        migrate_url(url)
    try:
        with _continuous(config, spark) as results:
            written = {name: dict(zip(insert(url, [every_key_shape([topic], 12)]),
                                      every_key_shape([topic], 12), strict=True))
                       for name, url in entries}
            early = consume(stack.kafka_bootstrap, [topic], expect=24, timeout_s=60)
            assert len({r.outbox_id for r in early}) >= 12
            check_delivery(written, early)
            admin = psycopg2.connect(stack.postgres_url)
            admin.autocommit = True
            with admin.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{late_name}"')
            admin.close()
            migrate_url(late_url)
            msgs = every_key_shape([topic], 12)
            written["late"] = dict(zip(insert(late_url, [msgs]), msgs, strict=True))
            assert wait_for(lambda: query(late_url, "SELECT count(*) FROM kafka_messages")
                            == [(0,)], 60, 0.2)
    finally:
        drop = psycopg2.connect(stack.postgres_url)
        drop.autocommit = True
        with drop.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{late_name}" WITH (FORCE)')
        drop.close()
    got = consume(stack.kafka_bootstrap, [topic], expect=36, timeout_s=60)
    check_delivery(written, got)
    assert results and results[0].exit_code == ExitCode.OK


def test_a_drain_drains_every_database_it_reaches_and_says_one_was_not(
    stack: StackInfo, databases: Databases, spark: SparkSession, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    entries = databases(2)
    topic = unique("many")
    create_topics(stack.kafka_bootstrap, {topic: 3})
    gone = ("gone", entries[0][1].rpartition("/")[0] + "/m_never_created")
    data = profile_data(stack, tmp_path, [entries[0], gone, entries[1]], [topic])
    for _, url in entries:
        migrate_url(url)
    msgs = every_key_shape([topic], 30)
    written = {name: dict(zip(insert(url, [msgs]), msgs, strict=True))
               for name, url in entries}

    began = time.monotonic()
    result = _run(build_config(data, env={}), spark, available_now=True)
    took = time.monotonic() - began

    got = consume(stack.kafka_bootstrap, [topic], expect=60, timeout_s=60)
    codes = {o.name: o.exit_code for o in result.outcomes}
    print(f"exit {result.exit_code} after {took:.1f} s; per database {codes}")
    check_delivery(written, got)
    assert codes["db-0"] == codes["db-1"] == ExitCode.OK
    assert codes["gone"] != ExitCode.OK
    assert result.exit_code == codes["gone"]


def test_only_a_database_with_a_backlog_starts_a_streaming_query(
    stack: StackInfo, databases: Databases, spark: SparkSession, tmp_path: Path,
) -> None:
    """A continuous relay of several databases: one with a trickle stays on the driver's
    producer, one with a backlog (claims cut at the direct lane's limit) starts its query
    and its backlog goes to the executors; a consumer reads every id of both in order."""
    (quiet, quiet_url), (busy, busy_url) = entries = databases(2)
    topic = unique("many-lazy")
    create_topics(stack.kafka_bootstrap, {topic: 3})
    config = build_config(profile_data(stack, tmp_path, entries, [topic], direct_max_rows=20),
                          env={})
    for _, url in entries:
        migrate_url(url)
    backlog = every_key_shape([topic], 100)
    written = {busy: dict(zip(insert(busy_url, [backlog[j:j + 50] for j in
                                                range(0, len(backlog), 50)]),
                              backlog, strict=True))}
    with _continuous(config, spark) as results:
        trickle: dict[int, Msg] = {}
        for _ in range(5):  # rounds of 3 rows: each under the direct lane's limit
            msgs = every_key_shape([topic], 3)
            trickle.update(zip(insert(quiet_url, [msgs]), msgs, strict=True))
            time.sleep(0.5)
        written[quiet] = trickle
        expect = sum(len(m) for m in written.values())
        got = consume(stack.kafka_bootstrap, [topic], expect=expect, timeout_s=90)

        def names() -> set[str]:
            return {q.name for q in spark.streams.active}

        # The backlog's query may start after its rows left by the driver's producer.
        assert wait_for(lambda: any(n.endswith(f"/{busy}") for n in names()), 60, 0.2)
        time.sleep(3)  # a query the quiet database started beside it would be up by now
        active = names()
    assert not any(n.endswith(f"/{quiet}") for n in active), active
    check_delivery(written, got)
    assert results and results[0].exit_code == ExitCode.OK

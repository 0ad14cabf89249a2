"""`outbox-relay ledger show` after a real drain: staged records, then the Delta table the
relay's copies and maintenance (OPTIMIZE + VACUUM) leave, read without Spark.

Every command runs as a subprocess of the real CLI under tests/integration/cli_watch.py,
which fails the test if it started any process (the JVM) or imported pyspark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from outbox_relay.config import Config
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import SCHEMAS_DIR
from outbox_relay.exit_codes import ExitCode
from outbox_relay.ledger.delta import Ledger
from outbox_relay.ledger.delta_read import open_table
from outbox_relay.ledger.lookup import delta_records
from outbox_relay.stack import StackInfo
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import (
    Msg,
    Received,
    consume,
    create_topics,
    every_key_shape,
    insert,
    partitioning_bytes,
    query,
    unique,
)
from tests.integration.process import REPO, write_profile

pytestmark = pytest.mark.integration


def outbox_cli(profile: Path, report: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`outbox-relay --config PROFILE ARGS`, failing the test if it touched Spark."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.cli_watch", str(report), "--config",
         str(profile), *args],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    watched = json.loads(report.read_text())
    print(args, "->", done.returncode, done.stdout, done.stderr, watched)
    assert watched == {"spawned": [], "spark_modules": []}, watched
    return done


def staging_rows(url: str) -> int:
    return int(query(url, "SELECT count(*) FROM relay_ledger_staging")[0][0])


def expected_partition(msg: Msg, got: Received) -> str:
    if partitioning_bytes(msg.partition_key, msg.key) is None:
        return "partition chosen by the producer"
    return f"partition {got.partition} of 3 ("


def check_lines(profile: Path, tmp: Path, written: dict[int, Msg], got: dict[int, Received],
                where: str) -> None:
    for i, (mid, msg) in enumerate(sorted(written.items())):
        # Every message by id alone; every third by topic and id too.
        calls = [("--id", str(mid))] + ([("--topic", msg.topic, "--id", str(mid))]
                                        if i % 3 == 0 else [])
        for args in calls:
            done = outbox_cli(profile, tmp / "watch.json", "ledger", "show", *args)
            assert done.returncode == ExitCode.OK
            lines = done.stdout.splitlines()
            assert len(lines) == 1
            assert lines[0].startswith(f"message {mid} of topic {msg.topic!r}: published at ")
            assert where in lines[0]
            assert expected_partition(msg, got[mid]) in lines[0]


def test_ledger_show_answers_from_staging_then_from_delta_without_a_jvm(
    spark: SparkSession, stack: StackInfo, make_config: ConfigFactory, run_relay: RelayRunner,
    migrated_url: str, tmp_path: Path,
) -> None:
    topics = [unique("show.orders"), unique("show.odd_Topic-x.")]
    create_topics(stack.kafka_bootstrap, dict.fromkeys(topics, 3))
    (tmp_path / "blocker").write_text("a file where the copy wants a directory")
    good = make_config(topics)
    profile = write_profile(good, tmp_path / "profile.toml")

    # First drain: its copy to Delta fails (the path is unwritable), so the records stay staged.
    first = every_key_shape(topics, 6)
    ids = insert(migrated_url, [first])
    blocked = make_config(topics, ledger={"path": str(tmp_path / "blocker" / "ledger")})
    assert run_relay(blocked).exit_code == ExitCode.OK
    written = dict(zip(ids, first, strict=True))
    got = {r.outbox_id: r for r in consume(stack.kafka_bootstrap, topics, len(written))}
    assert staging_rows(migrated_url) > 0
    check_lines(profile, tmp_path, written, got, "(staged, not yet copied to Delta)")

    # The copy, a second drain with its own copy, then the operator's maintenance.
    ledger(spark, good).flush()
    second = every_key_shape(topics, 6)
    written.update(zip(insert(migrated_url, [second]), second, strict=True))
    assert run_relay(good).exit_code == ExitCode.OK
    ledger(spark, good).maintain(good.ledger.retention_hours)
    assert staging_rows(migrated_url) == 0
    got = {r.outbox_id: r for r in consume(stack.kafka_bootstrap, topics, len(written))}
    table = DeltaTable(good.ledger.path)
    history = [h["operation"] for h in table.history()]
    print("protocol:", table.protocol(), "configuration:", table.metadata().configuration,
          "history:", history, "files:", len(table.file_uris()))
    assert "OPTIMIZE" in history
    check_lines(profile, tmp_path, written, got, "(in the Delta ledger)")

    # Misses: an id never written, and a real id under another topic.
    top = max(written)
    for args in (("--id", str(top + 1000)), ("--topic", topics[1], "--id", str(min(written)))):
        done = outbox_cli(profile, tmp_path / "watch.json", "ledger", "show", *args)
        assert done.returncode == ExitCode.NOT_FOUND
        assert "no record in the ledger" in done.stdout


def ledger(spark: SparkSession, config: Config) -> Ledger:
    return Ledger(spark, config, Database(config.postgres, "test-ledger-show"))


def test_ledger_show_on_a_path_that_is_not_a_delta_table_says_so(
    make_config: ConfigFactory, tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "exports"
    elsewhere.mkdir()
    (elsewhere / "orders.csv").write_text("id,topic\n1,orders\n")
    profile = write_profile(make_config(ledger={"path": str(elsewhere)}), tmp_path / "p.toml")
    done = outbox_cli(profile, tmp_path / "watch.json", "ledger", "show", "--id", "1")
    assert done.returncode == ExitCode.USAGE
    assert f"ledger.path: {elsewhere} is not a Delta table" in done.stderr


def test_the_commands_that_only_look_start_no_jvm(
    make_config: ConfigFactory, migrated_url: str, tmp_path: Path,
) -> None:
    topic = unique("look.only")
    insert(migrated_url, [[Msg(topic, b"k", b"v")]])
    profile = write_profile(make_config(), tmp_path / "p.toml")
    looks = (["topics"], ["parked", "list"], ["peek", "--topic", topic],
             ["ledger", "show", "--id", "1"], ["ledger", "show", "--topic", topic, "--id", "1"],
             ["status"])
    for args in looks:
        done = outbox_cli(profile, tmp_path / "watch.json", *args)
        assert done.returncode in (ExitCode.OK, ExitCode.NOT_FOUND), done.stderr
        if args[0] == "topics":
            assert topic in done.stdout
        if args[0] == "peek":
            assert "key='k'" in done.stdout
    # The control: a command that does need Spark is seen starting it.
    report = tmp_path / "control.json"
    subprocess.run([sys.executable, "-m", "tests.integration.cli_watch", str(report),
                    "--config", str(profile), "ledger", "flush"],
                   cwd=REPO, capture_output=True, text=True, timeout=300)
    control = json.loads(report.read_text())
    print("control:", control)
    assert "pyspark" in control["spark_modules"]
    assert any("subprocess.Popen" in s for s in control["spawned"])


def test_the_commands_that_only_look_refuse_an_older_schema_in_one_line(
    make_config: ConfigFactory, migrated_url: str, tmp_path: Path,
) -> None:
    """After an upgrade of the package and before any relay or `migrate` ran: one line
    that says what to run, not the first missing column (they never migrate: a look must
    not change the schema under a running relay of the older version)."""
    profile = write_profile(make_config(), tmp_path / "p.toml")
    looks = (["status"], ["ledger", "show", "--id", "1"], ["topics"], ["parked", "list"],
             ["peek", "--topic", "t"], ["metrics", "serve", "--once"])
    newest = max(int(f.name[:4]) for f in SCHEMAS_DIR.glob("*.sql"))
    query(migrated_url, "DELETE FROM relay_schema_migrations WHERE version = %s", (newest,))
    for args in looks:
        done = outbox_cli(profile, tmp_path / "watch.json", *args)
        assert done.returncode == ExitCode.USAGE, args
        assert done.stdout == ""
        assert done.stderr.startswith(
            f"outbox-relay: the database schema is behind (at {newest - 1:04d}; missing "
            f"{newest:04d}_"), done.stderr
        assert done.stderr.rstrip().endswith("run `outbox-relay migrate`")
        assert len(done.stderr.splitlines()) == 1
    query(migrated_url, "DROP TABLE relay_schema_migrations")
    done = outbox_cli(profile, tmp_path / "watch.json", "ledger", "show", "--id", "1")
    assert (done.returncode, done.stderr) == (
        ExitCode.USAGE, "outbox-relay: the database has no relay schema: run "
        "`outbox-relay migrate`\n")


def test_the_reader_reads_the_features_delta_spark_can_give_a_ledger(
    spark: SparkSession, tmp_path: Path,
) -> None:
    """A ledger table with deletion vectors (one row deleted through one) and column
    mapping, as a Databricks workspace can make them by default: the rows read back
    without Spark are exactly the ones Spark still sees."""
    path = str(tmp_path / "featured")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (topic string, message_id bigint, outcome string, "
        "session_id string, source string, relayed_at timestamp, copy_batch bigint, "
        "origin string) USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
        "'delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '3', "
        "'delta.minWriterVersion' = '7')"
    )
    spark.sql(
        f"INSERT INTO delta.`{path}` SELECT 'orders', id, 'published', 's-1', 'relay-a', "
        "current_timestamp(), 1, 'o' FROM range(1, 1001)"
    )
    spark.sql(f"DELETE FROM delta.`{path}` WHERE message_id = 500")
    log = "".join(p.read_text() for p in sorted(Path(path, "_delta_log").glob("*.json")))
    assert '"deletionVector":{' in log  # the delete wrote a vector, not a new file
    table = open_table(path)
    assert table is not None
    protocol = table.protocol()
    print("protocol:", protocol)
    assert {"deletionVectors", "columnMapping"} <= set(protocol.reader_features or [])
    assert [r.message_id for r in delta_records(table, 499, "orders", "o")] == [499]
    assert delta_records(table, 500, None, "o") == []
    kept = spark.read.format("delta").load(path).where("message_id = 500").count()
    assert kept == 0


STAGE = """
INSERT INTO relay_ledger_staging (session_id, topic, outcome, ids, source)
VALUES (gen_random_uuid(), %s, %s, %s, 'relay-a') RETURNING seq
"""


def test_ledger_show_tells_known_unknown_and_keyless_partitions_and_who_acted(
    make_config: ConfigFactory, migrated_url: str, tmp_path: Path,
) -> None:
    """A record staged before the ledger kept partitions (partitioner NULL) says the
    partition is unknown; a keyed one names the partition its partitioner gives, a
    keyless one says the producer chose, and a skipped one names who skipped it."""
    topic = unique("staged.cols")
    profile = write_profile(make_config(), tmp_path / "p.toml")
    # The expected partition comes from Kafka's published murmur2 test vector for
    # "foobar" (-790332482), through the Java client's toPositive, not from the relay.
    key = b"foobar"
    murmur = (-790332482 & 0x7FFFFFFF) % 12

    def line(message_id: int) -> str:
        done = outbox_cli(profile, tmp_path / "watch.json", "ledger", "show", "--id",
                          str(message_id))
        assert done.returncode == ExitCode.OK
        (only,) = done.stdout.splitlines()
        return only

    for ids, outcome, keys, partitions, partitioner, actor in (
        ([1, 2], "published", None, None, None, None),
        ([9, 10, 11], "published", [b"x", key, None], 12, "murmur2", None),
        ([12], "skipped", None, None, None, "alice@ops-1"),
    ):
        query(migrated_url, STAGE, (topic, outcome, ids, keys, partitions, partitioner, actor))
    assert "partition unknown" in line(1)
    assert "published" in line(10) and f"partition {murmur} of 12 (" in line(10)
    assert "partition chosen by the producer" in line(11)
    assert "skipped" in line(12) and "by alice@ops-1," in line(12)
    assert "not sent to Kafka" in line(12)


STAGE = """
INSERT INTO relay_ledger_staging (session_id, topic, outcome, ids, source, partitioning_keys,
                                  topic_partitions, partitioner, actor)
VALUES (gen_random_uuid(), %s, %s, %s, 'relay-a', %s, %s, %s, %s) RETURNING seq
"""

"""The ledger says which partition each keyed message went to, as a real consumer saw it.

A real relay drains adversarial key shapes (key NULL; partition_key NULL, equal to the
key's text or different; binary keys; b'' and '') with each partitioner, one on a topic
with the relay's compaction. The ledger's partition of every published message must
equal the partition an independent consumer read it from, NULL for keyless messages
(the producer chose) and for compacted ones (never sent): first from staging (the copy
is made to fail), then from Delta after a copy. And a ledger written before these
columns existed takes the new rows and still answers.
"""

from __future__ import annotations

import random
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from outbox_relay.config import Config
from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import SCHEMAS_DIR, migrate
from outbox_relay.errors import DatabaseError
from outbox_relay.ledger import staging
from outbox_relay.ledger.delta import Ledger
from outbox_relay.ledger.rows import LEDGER_COLUMNS
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    insert,
    partitioning_bytes,
    query,
    unique,
)
from tests.integration.test_key_order import EDGE_ROWS, _adversarial

pytestmark = pytest.mark.integration

PARTITIONS = 5
Answer = tuple[str, int | None, int | None, str | None]  # outcome, partition, count, partitioner


def _written(topic: str, rng: random.Random) -> list[Msg]:
    edges = [Msg(topic, k, f"edge-{n}".encode(), partition_key=p)
             for n, (p, k) in enumerate(EDGE_ROWS)]
    return _adversarial(topic, 300, rng) + edges


def test_the_ledger_partition_of_each_message_is_where_a_consumer_read_it(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    spark: SparkSession, tmp_path: Path,
) -> None:
    rng = random.Random(20261126)
    topics = {"murmur2": unique("lpart-m"), "crc32": unique("lpart-c")}
    create_topics(stack.kafka_bootstrap, dict.fromkeys(topics.values(), PARTITIONS))
    written: dict[int, Msg] = {}
    for topic in topics.values():
        msgs = _written(topic, rng)
        written |= dict(zip(insert(migrated_url, [msgs]), msgs, strict=True))
    blocked = tmp_path / "not-a-directory"  # every copy to Delta fails: records stay staged
    blocked.write_text("")
    for partitioner, topic in topics.items():
        rules = [{"match": topic, "compact": True}] if partitioner == "murmur2" else []
        config = make_config([topic], name=partitioner, ledger={"path": str(blocked)},
                             relay={"partitioner": partitioner, "topic_rules": rules,
                                    "batch_size": 97})
        assert run_relay(config).exit_code == EXIT_OK

    db = Database(make_config().postgres, "test-lookup")
    try:
        in_staging = {i: _answer(staging.staged_for(db, m.topic, i)) for i, m in written.items()}
    finally:
        db.close()
    published = [i for i, a in in_staging.items() if a[0] == "published"]
    received = consume(stack.kafka_bootstrap, list(topics.values()), expect=len(published))
    seen: dict[int, set[int]] = defaultdict(set)
    for r in received:
        seen[r.outbox_id].add(r.partition)
    assert sorted(seen) == sorted(published), "every published message, and nothing else"
    assert all(len(p) == 1 for p in seen.values())

    partitioner_of = {t: p for p, t in topics.items()}
    expected: dict[int, Answer] = {}
    for i, m in written.items():
        if i not in seen:  # superseded by a later message of its key, never sent
            expected[i] = ("compacted", None, None, None)
            continue
        keyed = partitioning_bytes(m.partition_key, m.key) is not None
        expected[i] = ("published", min(seen[i]) if keyed else None, PARTITIONS,
                       partitioner_of[m.topic])
    compacted = sum(1 for a in expected.values() if a[0] == "compacted")
    keyless = sum(1 for a in expected.values() if a[0] == "published" and a[1] is None)
    print(f"{len(written)} written, {len(published)} published ({keyless} keyless), "
          f"{compacted} compacted")
    assert compacted > 0 and keyless > 0
    assert in_staging == expected, "the staged lookup"

    good = make_config(ledger={"path": str(tmp_path / "ledger")})
    ledger = Ledger(spark, good, Database(good.postgres, "test-ledger"))
    ledger.flush()
    rows = ledger.table().select(*LEDGER_COLUMNS).collect()
    in_delta = {r.message_id: (r.outcome, r.kafka_partition, r.topic_partitions, r.partitioner)
                for r in rows}
    assert len(rows) == len(written)
    assert in_delta == expected, "the Delta ledger"
    assert query(migrated_url, "SELECT count(*) FROM relay_ledger_staging") == [(0,)]


def _answer(records: list[dict[str, Any]]) -> Answer:
    [r] = records
    return (r["outcome"], r["kafka_partition"], r["topic_partitions"], r["partitioner"])


OLD_SCHEMA = (
    "topic string, message_id bigint, outcome string, session_id string, source string, "
    "relayed_at timestamp, copy_batch bigint, origin string"
)


def test_a_ledger_written_before_partitions_and_actors_takes_them_and_still_answers(
    spark: SparkSession, make_config: ConfigFactory, migrated_url: str,
) -> None:
    """The Delta schema grows on the next copy (mergeSchema); old rows read NULL there, and
    delta-rs (the readers without a JVM) reads the grown table."""
    config: Config = make_config()
    ledger = Ledger(spark, config, Database(config.postgres, "test-ledger"))
    # The columns the ledger had before (this module's LEDGER_COLUMNS up to `origin`).
    old = spark.createDataFrame(
        [("orders", 1, "published", "s-0", "old", None, 1, ledger.origin)], OLD_SCHEMA)
    old.write.format("delta").save(config.ledger.path)
    query(migrated_url, """
        INSERT INTO relay_ledger_staging
            (session_id, topic, outcome, ids, source, partitioning_keys, topic_partitions,
             partitioner, actor)
        VALUES (gen_random_uuid(), 'orders', 'published', '{2}', 'new', '{"\\\\x6b31"}', 4,
                'crc32', NULL),
               (gen_random_uuid(), 'orders', 'skipped', '{3}', 'new', NULL, NULL, NULL,
                'alice@host')
    """)
    ledger.flush()

    table = ledger.table()
    assert tuple(table.columns) == LEDGER_COLUMNS
    got = {r.message_id: (r.outcome, r.kafka_partition, r.partitioner, r.actor)
           for r in table.collect()}
    assert got == {1: ("published", None, None, None),
                   2: ("published", staging.kafka_partition("crc32", b"k1", 4), "crc32", None),
                   3: ("skipped", None, None, "alice@host")}
    assert [(e.outcome, e.kafka_partition, e.where) for e in ledger.lookup("orders", 1)] == [
        ("published", None, "delta")]
    assert [(e.outcome, e.actor) for e in ledger.lookup("orders", 3)] == [
        ("skipped", "alice@host")]

    read = DeltaTable(config.ledger.path).to_pyarrow_table().to_pylist()
    assert {r["message_id"]: (r["kafka_partition"], r["actor"]) for r in read} == {
        k: (v[1], v[3]) for k, v in got.items()}


def test_migration_0012_keeps_staged_records_and_checks_the_new_ones(
    database_url: str, tmp_path: Path,
) -> None:
    """A database staged by the schema before 0012 (a relay mid-upgrade) keeps its
    records; the new columns then refuse an operator's outcome without an actor and key
    arrays that are not parallel to the ids."""
    before = tmp_path / "schemas"
    before.mkdir()
    for f in SCHEMAS_DIR.glob("*.sql"):
        if int(f.name[:4]) < 12:
            shutil.copy(f, before / f.name)
    db = Database(build_config({"postgres": {"url": database_url}}, env={}).postgres)
    try:
        migrate(db, before)
        db.execute("INSERT INTO relay_ledger_staging (session_id, topic, outcome, ids, source)"
                   " VALUES (gen_random_uuid(), 'orders', 'published', '{1,2}', 'old')")
        later = sorted(f.stem for f in SCHEMAS_DIR.glob("*.sql") if int(f.name[:4]) >= 12)
        assert later[0] == "0012_ledger_operators_and_partitions"
        assert migrate(db) == later
        assert db.all("SELECT ids, partitioner, actor FROM relay_ledger_staging") == [
            {"ids": [1, 2], "partitioner": None, "actor": None}]
        stage = ("INSERT INTO relay_ledger_staging (session_id, topic, outcome, ids, source,"
                 " actor, partitioning_keys) VALUES (gen_random_uuid(), 't', %s, '{3,4}', 's',"
                 " %s, %s)")
        db.execute(stage, ("skipped", "alice@host", None))
        for bad in (("skipped", None, None), ("dropped", None, None),
                    ("published", None, [b"k"]), ("lost", "alice@host", None)):
            with pytest.raises(DatabaseError, match="violates check constraint"):
                db.execute(stage, bad)
    finally:
        db.close()

"""The delta-rs copy's explode (outbox_relay.ledger.delta_rs.exploded, pyarrow and numpy) against
the Spark copy's (outbox_relay.ledger.rows.explode_staging), on the same staged records.

Either writer may copy a batch to the same ledger (ledger.writer, and `auto` falls back
to Spark mid-run), so the two must leave identical rows: same ids, outcomes, partitions
and instants, whatever the keys (NULL, b'', not UTF-8), the partitioner (murmur2, crc32,
NULL) or the partition count (NULL, 0).
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from outbox_relay.ledger import delta_rs
from outbox_relay.ledger.rows import LEDGER_COLUMNS, explode_staging
from outbox_relay.rules.partitioners import partition_for

pytestmark = pytest.mark.spark

UTC = dt.UTC
# The columns of relay_ledger_staging that delta_rs.BATCH_ROWS selects, typed as the
# Spark copy's JDBC read of the table gives them.
STAGED = T.StructType([
    T.StructField("session_id", T.StringType()),
    T.StructField("topic", T.StringType()),
    T.StructField("outcome", T.StringType()),
    T.StructField("source", T.StringType()),
    T.StructField("relayed_at", T.TimestampType()),
    T.StructField("copy_batch", T.LongType()),
    T.StructField("topic_partitions", T.IntegerType()),
    T.StructField("partitioner", T.StringType()),
    T.StructField("actor", T.StringType()),
    T.StructField("ids", T.ArrayType(T.LongType())),
    T.StructField("partitioning_keys", T.ArrayType(T.BinaryType())),
])
# Not on a whole second, and in another zone than UTC: the instant must survive both.
AT = dt.datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=UTC)
AT_PLUS2 = dt.datetime(2026, 3, 29, 4, 0, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=2)))
ORIGIN = "origin-7f3a"
ADVERSARIAL_KEYS: list[bytes | None] = [
    b"order-1", None, b"", b"\x00", b"\xff\xfe\x80", b"\xc3\x28", "ключ-ü🚀".encode(),
    b"abcd", b"abcde", b"abcdefg", b"\\x41",
]


def _record(session: str, ids: list[int], *, outcome: str = "published",
            keys: list[bytes | None] | None = None, partitions: int | None = 5,
            partitioner: str | None = "murmur2", topic: str = "t", actor: str | None = None,
            at: dt.datetime = AT, batch: int = 3) -> dict[str, Any]:
    return {"session_id": session, "topic": topic, "outcome": outcome, "source": "src",
            "relayed_at": at, "copy_batch": batch, "topic_partitions": partitions,
            "partitioner": partitioner, "actor": actor, "ids": ids,
            "partitioning_keys": keys}


def _instant(value: dt.datetime | None) -> dt.datetime | None:
    # Spark hands back naive local wall-clock times, delta-rs aware UTC ones; astimezone
    # reads a naive value as local, so both become the same UTC instant.
    return None if value is None else value.astimezone(UTC)


def _rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out = [tuple(_instant(r[c]) if c == "relayed_at" else r[c] for c in LEDGER_COLUMNS)
           for r in rows]
    return sorted(out, key=repr)


def _both(spark: SparkSession, records: list[dict[str, Any]]
          ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(delta-rs rows, Spark rows) of the same staged records."""
    arrow = delta_rs.exploded(records, ORIGIN)
    staged = spark.createDataFrame([tuple(r[f.name] for f in STAGED) for r in records], STAGED)
    spark_rows = [r.asDict() for r in explode_staging(staged, ORIGIN).collect()]
    return _rows(arrow.to_pylist()), _rows(spark_rows)


def _ids(first: int, n: int) -> list[int]:
    return list(range(first, first + n))


def test_both_explodes_give_identical_rows_for_adversarial_keys_and_partitioners(
    spark: SparkSession,
) -> None:
    n = len(ADVERSARIAL_KEYS)
    records = [
        _record("s-m5", _ids(100, n), keys=ADVERSARIAL_KEYS, partitions=5),
        _record("s-m1", _ids(200, n), keys=ADVERSARIAL_KEYS, partitions=1),
        _record("s-c7", _ids(300, n), keys=ADVERSARIAL_KEYS, partitions=7,
                partitioner="crc32", at=AT_PLUS2),
        _record("s-mnull", _ids(400, n), keys=ADVERSARIAL_KEYS, partitions=None),
        _record("s-m0", _ids(500, n), keys=ADVERSARIAL_KEYS, partitions=0),
        _record("s-cnull", _ids(600, n), keys=ADVERSARIAL_KEYS, partitions=None,
                partitioner="crc32"),
        _record("s-pnull", _ids(700, n), keys=ADVERSARIAL_KEYS, partitions=5,
                partitioner=None),
        # Staged before the keys were kept: no bytes, no count, no partitioner.
        _record("s-old", _ids(800, 3), keys=None, partitions=None, partitioner=None),
        _record("s-compacted", _ids(900, 2), outcome="compacted", keys=None,
                partitions=None, partitioner=None),
        _record("s-parked", _ids(1000, 2), outcome="parked", keys=None, partitions=None,
                partitioner=None, topic="u"),
        _record("s-skipped", [1100], outcome="skipped", keys=None, partitions=None,
                partitioner=None, actor="alice@host"),
        _record("s-empty", [], keys=[]),  # a session whose ids are all gone: no row
    ]
    rs, sp = _both(spark, records)
    print(f"{len(rs)} rows; first: {rs[0]}")
    assert len(rs) == sum(len(r["ids"]) for r in records)
    assert rs == sp


def test_the_exploded_partitions_are_the_reference_partitioners_own(
    spark: SparkSession,
) -> None:
    """Equal to each other is not enough: both could be wrong alike. The pure-Python
    partitioners (pinned to the real clients elsewhere) say what each row must hold."""
    n = len(ADVERSARIAL_KEYS)
    records = [
        _record("s-m", _ids(1, n), keys=ADVERSARIAL_KEYS, partitions=7),
        _record("s-c", _ids(101, n), keys=ADVERSARIAL_KEYS, partitions=7, partitioner="crc32"),
        _record("s-z", _ids(201, n), keys=ADVERSARIAL_KEYS, partitions=0),
        _record("s-n", _ids(301, n), keys=ADVERSARIAL_KEYS, partitions=None,
                partitioner="crc32"),
        _record("s-p", _ids(401, n), keys=ADVERSARIAL_KEYS, partitions=7, partitioner=None),
    ]
    got = {r["message_id"]: r["kafka_partition"]
           for r in delta_rs.exploded(records, ORIGIN).to_pylist()}
    expected: dict[int, int | None] = {}
    for first, partitioner in ((1, "murmur2"), (101, "crc32")):
        for i, key in enumerate(ADVERSARIAL_KEYS):
            expected[first + i] = (None if key is None
                                   else partition_for(partitioner, key, 7))  # type: ignore[arg-type]
    # No count, a count of 0, or no partitioner: the partition is unknown, never guessed.
    expected |= dict.fromkeys(range(201, 201 + n), None)
    expected |= dict.fromkeys(range(301, 301 + n), None)
    expected |= dict.fromkeys(range(401, 401 + n), None)
    assert got == expected
    rs, sp = _both(spark, records)
    assert rs == sp


def test_random_sessions_explode_alike_in_both_copies(spark: SparkSession) -> None:
    rng = random.Random(20261202)
    records: list[dict[str, Any]] = []
    next_id = 1
    for s in range(40):
        size = rng.randrange(0, 30)
        keys: list[bytes | None] | None = [
            None if rng.random() < 0.15 else bytes(rng.randrange(256)
                                                   for _ in range(rng.randrange(0, 12)))
            for _ in range(size)]
        outcome = rng.choice(["published", "published", "compacted", "parked"])
        partitioner = rng.choice(["murmur2", "crc32", None])
        partitions = rng.choice([None, 0, 1, 3, 12])
        if outcome != "published" or rng.random() < 0.1:
            keys = None
        records.append(_record(f"s-{s}", _ids(next_id, size), outcome=outcome, keys=keys,
                               partitions=partitions, partitioner=partitioner,
                               topic=rng.choice(["a", "b"]), batch=rng.choice([1, 2])))
        next_id += size
    rs, sp = _both(spark, records)
    assert len(rs) == next_id - 1
    assert rs == sp


def test_a_crc32_record_staged_with_zero_partitions_explodes_alike_in_both_copies(
    spark: SparkSession,
) -> None:
    records = [_record("s-c0", [1, 2, 3], keys=[b"k", None, b""], partitions=0,
                       partitioner="crc32")]
    rs, sp = _both(spark, records)
    assert [r[LEDGER_COLUMNS.index("kafka_partition")] for r in rs] == [None, None, None]
    assert rs == sp


def test_the_delta_rs_table_has_the_ledger_columns_and_types_of_the_spark_copy(
    spark: SparkSession,
) -> None:
    records = [_record("s-1", [1, 2], keys=[b"k", None])]
    table = delta_rs.exploded(records, ORIGIN)
    assert table.schema == delta_rs.SCHEMA
    assert tuple(delta_rs.SCHEMA.names) == LEDGER_COLUMNS
    staged = spark.createDataFrame([tuple(r[f.name] for f in STAGED) for r in records], STAGED)
    spark_types = {f.name: f.dataType.simpleString()
                   for f in explode_staging(staged, ORIGIN).schema.fields}
    arrow_as_spark = {pa.string(): "string", pa.int64(): "bigint", pa.int32(): "int",
                      pa.timestamp("us", tz="UTC"): "timestamp"}
    assert {f.name: arrow_as_spark[f.type] for f in delta_rs.SCHEMA} == spark_types


def test_staged_bytes_as_the_database_driver_gives_them_explode_like_bytes() -> None:
    """psycopg2 hands bytea[] elements back as memoryview, not bytes."""
    keys: list[bytes | None] = [b"\xff\x00", None, b""]
    as_bytes = delta_rs.exploded([_record("s", [1, 2, 3], keys=keys)], ORIGIN)
    as_views = delta_rs.exploded(
        [_record("s", [1, 2, 3], keys=[None if k is None else memoryview(k)  # type: ignore[misc]
                                       for k in keys])], ORIGIN)
    assert as_views.equals(as_bytes)
    assert as_bytes.column("kafka_partition").to_pylist() == [
        partition_for("murmur2", b"\xff\x00", 5), None, partition_for("murmur2", b"", 5)]

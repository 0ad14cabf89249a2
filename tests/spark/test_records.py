"""to_kafka_records on tiny inline data, compared with chispa."""

from __future__ import annotations

import datetime as dt

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outbox_relay.data.partitioning import partition_for
from outbox_relay.data.records import KAFKA_RECORD_COLUMNS, in_key_order, to_kafka_records
from outbox_relay.ledger.rows import LEDGER_COLUMNS, explode_staging, missing_rows, session_counts

pytestmark = pytest.mark.spark

CLAIMED_SCHEMA = (
    "id bigint, topic string, message binary, key binary, partition_key string, "
    "created_at timestamp, headers string"
)
CREATED = dt.datetime(2026, 1, 2, 3, 4, 5, 678901)
P = "outbox-relay."


def _claimed(spark: SparkSession, rows: list[tuple[object, ...]]) -> DataFrame:
    """The rows as the read gives them: each with its topic's partition count (t: 4, u: 3)."""
    count = F.when(F.col("topic") == "t", 4).when(F.col("topic") == "u", 3)
    return spark.createDataFrame(rows, CLAIMED_SCHEMA).withColumn("partition_count", count)


def _records(df: DataFrame, partitioner: str = "murmur2") -> DataFrame:
    return df.transform(
        to_kafka_records,
        source_name="src",
        header_prefix=P,
        partitioner=partitioner,
    )


def _reserved(i: int) -> list[tuple[str, bytes]]:
    return [
        (P + "id", str(i).encode()),
        (P + "source", b"src"),
        (P + "created-at", b"2026-01-02T03:04:05.678901Z"),
    ]


K1_PARTITION = partition_for("murmur2", b"k1", 4)


def test_records_schema_headers_and_tombstone(spark: SparkSession) -> None:
    claimed = _claimed(
        spark,
        [
            (1, "t", b"v1", b"k1", None, CREATED, '{"trace": "abc"}'),
            (2, "t", None, b"k1", None, CREATED, None),
        ],
    )
    out = _records(claimed)
    assert tuple(out.columns) == KAFKA_RECORD_COLUMNS
    expected = spark.createDataFrame(
        [
            ("t", b"k1", b"v1", [*_reserved(1), ("trace", b"abc")], K1_PARTITION),
            ("t", b"k1", None, _reserved(2), K1_PARTITION),
        ],
        "topic string, key binary, value binary, "
        "headers array<struct<key:string,value:binary>>, partition int",
    )
    assert_df_equality(out, expected, ignore_nullable=True)


def test_partition_key_decides_partition(spark: SparkSession) -> None:
    claimed = _claimed(
        spark,
        [
            (1, "t", b"v", b"k", "customer-9", CREATED, None),
            (2, "u", b"v", b"k", None, CREATED, None),
        ],
    )
    murmur = [r.partition for r in _records(claimed).orderBy("topic").collect()]
    assert murmur == [partition_for("murmur2", b"customer-9", 4),
                      partition_for("murmur2", b"k", 3)]
    crc = [r.partition for r in _records(claimed, "crc32").orderBy("topic").collect()]
    assert crc == [partition_for("crc32", b"customer-9", 4), partition_for("crc32", b"k", 3)]


# partition_key, key: one key K reached four ways (its text as partition_key with the same
# key, another key or none; the key's own bytes with partition_key NULL), a binary key
# that is not UTF-8, a partition_key that is another row's key, and a keyless row.
K = "customer-9"
ONE_KEY_ROWS: list[tuple[int, str | None, bytes | None]] = [
    (1, None, K.encode()), (2, K, K.encode()), (3, K, b"other"), (4, K, None),
    (5, None, b"\xff\xfe\x00\x80"), (6, "other", K.encode()), (7, None, None),
]


@pytest.mark.parametrize("partitioner", ["murmur2", "crc32"])
def test_every_keyed_row_gets_an_explicit_partition_from_the_stored_count(
    spark: SparkSession, partitioner: str
) -> None:
    """A key's rows get one explicit partition, from the count read with the rows (4 for
    topic t), whichever column their bytes came from: left to the producer, a row with
    partition_key NULL was hashed on the producer's own metadata, which can be another
    count. A keyless row's partition is its id modulo the count, on both lanes."""
    claimed = _claimed(spark, [(i, "t", b"v", k, p, CREATED, None) for i, p, k in ONE_KEY_ROWS])
    got = _records(claimed, partitioner).select(
        F.element_at("headers", 1).value.cast("string").cast("bigint").alias("id"),
        "partition")
    expected = spark.createDataFrame(
        [(i, i % 4 if p is None and k is None
          else partition_for(partitioner, p.encode() if p is not None else k, 4))  # type: ignore[arg-type]
         for i, p, k in ONE_KEY_ROWS],
        "id bigint, partition int")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    by_id = {r.id: r.partition for r in got.collect()}
    assert by_id[1] == by_id[2] == by_id[3] == by_id[4] is not None


def test_in_key_order_sorts_each_task_by_id(spark: SparkSession) -> None:
    rows = [(i, "t", b"v", b"k", None, CREATED, None) for i in (5, 3, 9, 1)]
    ordered = _claimed(spark, rows).coalesce(1).transform(in_key_order)
    assert [r.id for r in ordered.collect()] == [1, 3, 5, 9]


def test_explode_staging_one_row_per_message(spark: SparkSession) -> None:
    staged = spark.createDataFrame(
        [(7, "s-1", "t", "published", [3, 4], "src", CREATED, None, None, None, None)],
        "copy_batch bigint, session_id string, topic string, outcome string, ids array<bigint>, "
        "source string, relayed_at timestamp, partitioning_keys array<binary>, "
        "topic_partitions int, partitioner string, actor string",
    )
    out = staged.transform(explode_staging, "outbox-1")
    assert tuple(out.columns) == LEDGER_COLUMNS
    expected = spark.createDataFrame(
        [("t", i, "published", "s-1", "src", CREATED, 7, "outbox-1", None, None, None, None)
         for i in (3, 4)],
        "topic string, message_id bigint, outcome string, session_id string, source string, "
        "relayed_at timestamp, copy_batch bigint, origin string, kafka_partition int, "
        "topic_partitions int, partitioner string, actor string",
    )
    assert_df_equality(out, expected, ignore_nullable=True)


def test_session_counts_counts_rows_per_staged_record(spark: SparkSession) -> None:
    schema = (
        "topic string, message_id bigint, outcome string, session_id string, source string, "
        "relayed_at timestamp, copy_batch bigint, origin string"
    )
    ledger = spark.createDataFrame(
        [("t", i, "published", "s-1", "src", CREATED, 2, "o") for i in (1, 2, 3)]
        + [("t", 4, "compacted", "s-1", "src", CREATED, 2, "o"),
           ("u", 5, "published", "s-2", "src", CREATED, 2, "o")],
        schema,
    )
    expected = spark.createDataFrame(
        [("s-1", "t", "published", 3), ("s-1", "t", "compacted", 1), ("s-2", "u", "published", 1)],
        "session_id string, topic string, outcome string, rows bigint",
    )
    assert_df_equality(ledger.transform(session_counts), expected, ignore_row_order=True,
                       ignore_nullable=True)


def test_a_batch_number_handed_out_again_is_missing_all_its_rows() -> None:
    staged = {("s-new", "t", "published"): 2}
    # Batch 2 of the same origin is in the ledger already, with another session's rows.
    held = {("s-old", "t", "published"): 2}
    assert missing_rows(staged, held) == 2
    assert missing_rows(staged, {("s-new", "t", "published"): 1}) == 1
    assert missing_rows(staged, staged) == 0
    assert missing_rows(staged, {("s-new", "t", "compacted"): 2}) == 2

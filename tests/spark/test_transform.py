"""outbox_relay.data.transform on tiny inline data: the contract checks, and the records."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outbox_relay.data.partitioning import partition_for
from outbox_relay.data.records import in_key_order
from outbox_relay.data.transform import (
    TRANSFORM_COLUMNS,
    RowCounter,
    Transform,
    checked_records,
    transform_input,
)
from outbox_relay.errors import ConfigError
from tests.integration import transforms_for_tests as tt

pytestmark = pytest.mark.spark

CLAIMED_SCHEMA = (
    "id bigint, topic string, message binary, key binary, partition_key string, "
    "created_at string, headers string"
)
CREATED = "2026-01-02 03:04:05.678901"
P = "outbox-relay."


def _claimed(spark: SparkSession, rows: list[tuple[object, ...]], tasks: int = 1) -> DataFrame:
    """`rows` split into `tasks` tasks in order (parallelize slices evenly)."""
    rdd = spark.sparkContext.parallelize(rows, tasks)
    return spark.createDataFrame(rdd, CLAIMED_SCHEMA).withColumn("partition_count", F.lit(4))


def _rows(n: int, marked: dict[int, bytes] | None = None) -> list[tuple[object, ...]]:
    marked = marked or {}
    return [(i, "t", marked.get(i, f"v{i}".encode()), f"k{i % 3}".encode(), None, CREATED, None)
            for i in range(1, n + 1)]


def _run(spark: SparkSession, claimed: DataFrame, fn: Transform,
         partitioner: str = "murmur2") -> tuple[DataFrame, RowCounter]:
    counter = RowCounter(spark)
    given = claimed.transform(in_key_order).transform(
        transform_input, partitioner=partitioner)
    out = checked_records(fn(given), spec=f"tests:{fn.__name__}", expected=given.schema,
                          source_name="src", header_prefix=P, counter=counter)
    return out, counter


def test_the_transform_receives_the_documented_columns(spark: SparkSession) -> None:
    given = _claimed(spark, _rows(2)).transform(in_key_order).transform(
        transform_input, partitioner="murmur2")
    assert tuple(given.columns) == TRANSFORM_COLUMNS
    types = {f.name: f.dataType.simpleString() for f in given.schema.fields}
    assert types["headers"] == "map<string,string>"
    assert types["key"] == types["value"] == "binary"


def test_identity_gives_the_records_of_the_rows_in_id_order(spark: SparkSession) -> None:
    rows = [(2, "t", b"v2", b"k", None, CREATED, '{"trace": "x"}'),
            (1, "t", None, None, "pk", CREATED, None),
            (3, "t", b"v3", None, None, CREATED, None)]
    out, counter = _run(spark, _claimed(spark, rows), tt.identity)
    reserved = [(P + "source", b"src"), (P + "created-at", b"2026-01-02T03:04:05.678901Z")]
    expected = spark.createDataFrame(
        [("t", None, None, [(P + "id", b"1"), *reserved], partition_for("murmur2", b"pk", 4)),
         ("t", b"k", b"v2", [(P + "id", b"2"), *reserved, ("trace", b"x")],
          partition_for("murmur2", b"k", 4)),
         ("t", None, b"v3", [(P + "id", b"3"), *reserved], 3 % 4)],  # keyless: id mod count
        "topic string, key binary, value binary, "
        "headers array<struct<key:string,value:binary>>, partition int",
    )
    counter.reset()
    assert_df_equality(out, expected, ignore_nullable=True)
    counter.verify(3, "identity")


@pytest.mark.parametrize("partitioner", ["murmur2", "crc32"])
def test_a_changed_key_keeps_the_partition_of_the_original_bytes(
    spark: SparkSession, partitioner: str
) -> None:
    rows = [(1, "t", b'{"secret": "s1"}', b"k1", None, CREATED, None),
            (2, "t", b'{"secret": "s2"}', b"k2", "customer-7", CREATED, None),
            (3, "t", b"not json", None, None, CREATED, None)]
    out, _ = _run(spark, _claimed(spark, rows), tt.encrypt_secret, partitioner)
    got = out.collect()
    assert [r.key for r in got] == [b"enc:k1", b"enc:k2", None]
    assert [r.partition for r in got] == [partition_for(partitioner, b"k1", 4),
                                         partition_for(partitioner, b"customer-7", 4),
                                         3 % 4]  # keyless: its id modulo the count
    assert got[2].value == b"not json"
    assert (tt.MARK_HEADER, tt.SECRET_FIELD.encode()) in [tuple(h) for h in got[0].headers]


@pytest.mark.parametrize(("fn", "marked", "needle"), [
    (tt.drop_marked, {3: b"drop-me"},
     "row id 4 was read at position 3 of its task and came back at 2: a row was dropped"),
    (tt.drop_marked, {4: b"drop-me"},  # the last row of the first task
     r"the 1 row\(s\) that followed id 3 in its task are missing"),
    (tt.duplicate_marked, {2: b"dup-me"}, "row id 2 was read at position 1 of its task and "
                                          "came back at 2"),
    (tt.duplicate_marked, {4: b"dup-me"}, "row id 4 was read at position 3 of its task and "
                                          "came back at 4"),
    (tt.reorder_marked, {2: b"swap-me"}, "row id 3 was read at position 2 of its task and "
                                         "came back at 1"),
    (tt.repartition, {}, "moved from task|dropped, duplicated or reordered"),
    (tt.shift_ids, {}, r"id [15] came back as 100[15]"),
    (tt.forge_reserved_header, {}, "has a header named outbox-relay.*: the reserved headers"),
])
def test_a_broken_contract_fails_the_task_naming_the_transform(
    spark: SparkSession, fn: Transform, marked: dict[int, bytes], needle: str
) -> None:
    # Two tasks of four rows each: ids 1-4 and 5-8.
    out, _ = _run(spark, _claimed(spark, _rows(8, marked), tasks=2), fn)
    with pytest.raises(Exception, match=needle) as caught:
        out.collect()
    assert f"transform tests:{fn.__name__} broke its contract on topic t" in str(caught.value)


def test_a_task_emptied_by_the_transform_fails_the_count(spark: SparkSession) -> None:
    out, counter = _run(spark, _claimed(spark, _rows(8), tasks=2), tt.drop_everything)
    counter.reset()
    assert out.collect() == []
    claimed = r"0 row\(s\) came out of the transform, 8 were claimed"
    with pytest.raises(ConfigError, match=claimed):
        counter.verify(8, "transform tests:drop_everything (t)")


def test_a_transform_that_loses_the_relay_column_is_refused(spark: SparkSession) -> None:
    with pytest.raises(ConfigError, match="must return the columns it received"):
        _run(spark, _claimed(spark, _rows(2)), tt.lose_relay_column)

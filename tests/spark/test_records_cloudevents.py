"""The CloudEvents attributes of a record (outbox_relay.data.records, outbox_relay.data.transform)
on tiny inline data, compared with chispa."""

from __future__ import annotations

import datetime as dt

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outbox_relay.data.partitioning import partition_for
from outbox_relay.data.records import CloudEventTopics, in_key_order, to_kafka_records
from outbox_relay.data.transform import RowCounter, Transform, checked_records, transform_input

pytestmark = pytest.mark.spark

CLAIMED_SCHEMA = (
    "id bigint, topic string, message binary, key binary, partition_key string, "
    "created_at timestamp, headers string"
)
RECORD_SCHEMA = ("topic string, key binary, value binary, "
                 "headers array<struct<key:string,value:binary>>, partition int")
CREATED = dt.datetime(2026, 1, 2, 3, 4, 5, 678901)
TIME = b"2026-01-02T03:04:05.678901Z"
P = "outbox-relay."
# "ce": CloudEvents with a default type; "ce_own": without one; "plain": none.
TOPICS: CloudEventTopics = (("ce", "com.example.default"), ("ce_own", None))
PK = partition_for("murmur2", b"k", 4)
PK_CUSTOMER = partition_for("murmur2", b"customer-9", 4)


def _claimed(spark: SparkSession, rows: list[tuple[object, ...]]) -> DataFrame:
    return spark.createDataFrame(rows, CLAIMED_SCHEMA).withColumn("partition_count", F.lit(4))


def _reserved(i: int) -> list[tuple[str, bytes]]:
    return [(P + "id", str(i).encode()), (P + "source", b"src"), (P + "created-at", TIME)]


def _attributes(i: int) -> list[tuple[str, bytes]]:
    return [("ce_specversion", b"1.0"), ("ce_id", str(i).encode()), ("ce_source", b"src"),
            ("ce_time", TIME)]


ROWS = [
    # A typed row keeps its own ce_type and content-type; no default is added.
    (1, "ce", b"v1", b"k", None, CREATED,
     '{"ce_type": "com.example.own", "content-type": "application/json"}'),
    # No headers: the rule's default type. Binary key, partition_key NULL.
    (2, "ce", b"v2", b"\x00\xff", None, CREATED, None),
    # Other headers, no type: the default again. Key NULL, partition_key set.
    (3, "ce", b"v3", None, "customer-9", CREATED, '{"trace": "t"}'),
    # No default on its rule: the row's own type only.
    (4, "ce_own", b"v4", b"k", "k", CREATED, '{"ce_type": "com.example.own"}'),
    # Not a CloudEvents topic: no attribute, even with a ce_type header of its own.
    (5, "plain", b"v5", b"k", "customer-9", CREATED, '{"ce_type": "x"}'),
    (6, "plain", None, None, None, CREATED, None),
]
DEFAULT = [("ce_type", b"com.example.default")]
EXPECTED = [
    ("ce", b"k", b"v1", [*_reserved(1), *_attributes(1), ("ce_type", b"com.example.own"),
                         ("content-type", b"application/json")], PK),
    ("ce", b"\x00\xff", b"v2", [*_reserved(2), *_attributes(2), *DEFAULT],
     partition_for("murmur2", b"\x00\xff", 4)),
    ("ce", None, b"v3", [*_reserved(3), *_attributes(3), *DEFAULT, ("trace", b"t")],
     PK_CUSTOMER),
    ("ce_own", b"k", b"v4", [*_reserved(4), *_attributes(4),
                             ("ce_type", b"com.example.own")], PK),
    ("plain", b"k", b"v5", [*_reserved(5), ("ce_type", b"x")], PK_CUSTOMER),
    ("plain", None, None, _reserved(6), 6 % 4),  # keyless: its id modulo the count
]


def test_a_cloudevents_topic_gets_the_bindings_attributes(spark: SparkSession) -> None:
    out = _claimed(spark, ROWS).transform(in_key_order).transform(
        to_kafka_records, source_name="src", header_prefix=P, partitioner="murmur2",
        cloudevents=TOPICS)
    expected = spark.createDataFrame(EXPECTED, RECORD_SCHEMA)
    assert_df_equality(out, expected, ignore_nullable=True)


def test_the_column_cache_is_keyed_by_the_cloudevents_topics(spark: SparkSession) -> None:
    """Columns cached for other CloudEvents topics never serve this batch: row 1 (topic
    "ce", two user headers) gets the attributes exactly when "ce" is among them."""
    claimed = _claimed(spark, ROWS[:1]).transform(in_key_order)
    for topics, count in (((), 5), (TOPICS, 9), ((("ce_own", None),), 5), (TOPICS, 9)):
        out = claimed.transform(to_kafka_records, source_name="src", header_prefix=P,
                                partitioner="murmur2", cloudevents=topics)
        assert len(out.first()["headers"]) == count, topics


def _set_type(df: DataFrame) -> DataFrame:
    """A transform that sets ce_type to the value's text."""
    typed = F.map_concat(F.coalesce("headers", F.create_map().cast("map<string,string>")),
                         F.create_map(F.lit("ce_type"), F.col("value").cast("string")))
    return df.withColumn("headers", typed)


def _forge_ce_id(df: DataFrame) -> DataFrame:
    return df.withColumn("headers", F.create_map(F.lit("ce_id"), F.lit("forged")))


def _drop_headers(df: DataFrame) -> DataFrame:
    return df.withColumn("headers", F.lit(None).cast("map<string,string>"))


def _transformed(spark: SparkSession, topic: str, fn: Transform) -> DataFrame:
    claimed = _claimed(spark, [(1, topic, b"t.one", b"k", None, CREATED, None)])
    given = claimed.transform(in_key_order).transform(transform_input, partitioner="murmur2")
    return checked_records(fn(given), spec=f"tests:{fn.__name__}", expected=given.schema,
                           source_name="src", header_prefix=P, counter=RowCounter(spark),
                           cloudevents=TOPICS)


def test_a_transformed_record_gets_the_attributes_after_the_transform(
    spark: SparkSession,
) -> None:
    out = _transformed(spark, "ce_own", _set_type)
    expected = spark.createDataFrame(
        [("ce_own", b"k", b"t.one", [*_reserved(1), *_attributes(1), ("ce_type", b"t.one")],
          PK)], RECORD_SCHEMA)
    assert_df_equality(out, expected, ignore_nullable=True)
    defaulted = _transformed(spark, "ce", _drop_headers).first()["headers"]
    assert [(h["key"], bytes(h["value"])) for h in defaulted] == [
        *_reserved(1), *_attributes(1), *DEFAULT]


@pytest.mark.parametrize(("topic", "fn", "needle"), [
    ("ce", _forge_ce_id, "has a header named like a CloudEvents attribute the relay writes"),
    ("ce_own", _drop_headers, "has no ce_type header on a CloudEvents topic"),
])
def test_a_transform_may_not_forge_an_attribute_or_lose_a_required_type(
    spark: SparkSession, topic: str, fn: Transform, needle: str,
) -> None:
    with pytest.raises(Exception, match=needle) as caught:
        _transformed(spark, topic, fn).collect()
    assert f"transform tests:{fn.__name__} broke its contract on topic {topic}" in str(
        caught.value)

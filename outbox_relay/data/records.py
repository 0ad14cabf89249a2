"""Pure DataFrame transforms from claimed outbox rows to Kafka sink records."""

from __future__ import annotations

import functools

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from outbox_relay.data.partitioning import Partitioner, partition_col, partitioning_key_col
from outbox_relay.rules import cloudevents as ce
from outbox_relay.rules.headers import HEADER_CREATED_AT, HEADER_ID, HEADER_SOURCE

KAFKA_RECORD_COLUMNS = ("topic", "key", "value", "headers", "partition")
# What the records are made from: the read's columns (outbox_relay/schemas/0014) but key_hash.
CLAIMED_COLUMNS = ("id", "topic", "message", "key", "partition_key", "created_at", "headers",
                   "partition_count")
USER_HEADERS_TYPE = "map<string,string>"
HEADERS_TYPE = "array<struct<key:string,value:binary>>"
# The CloudEvents topics of a plan with each one's default ce_type (None: the row's own
# only), sorted by topic: hashable, so it keys the column cache (_record_columns).
CloudEventTopics = tuple[tuple[str, str | None], ...]


def _header(name: str | Column, value: Column) -> Column:
    key = F.lit(name) if isinstance(name, str) else name
    return F.struct(key.alias("key"), value.cast("binary").alias("value"))


def _iso_utc(created_at: Column) -> Column:
    """`yyyy-MM-ddTHH:mm:ss.ffffffZ` from the text of a UTC wall clock.

    The read delivers PostgreSQL's text (`yyyy-MM-dd HH:mm:ss[.f]`, trailing zeros of the
    fraction dropped); text only, so no time zone of any JVM takes part.
    """
    text = created_at.cast("string")
    fraction = F.rpad(F.regexp_extract(text, r"\.(\d{1,6})$", 1), 6, "0")
    return F.concat(F.translate(F.substring(text, 1, 19), " ", "T"), F.lit("."), fraction,
                    F.lit("Z"))


def reserved_headers(source_name: str, prefix: str, outbox_id: Column,
                     created_at: Column) -> Column:
    """The reserved headers (outbox_relay.rules.headers) of a record: built by the relay, never by a
    transform, so a consumer can trust them."""
    return F.array(
        _header(prefix + HEADER_ID, outbox_id.cast("string")),
        _header(prefix + HEADER_SOURCE, F.lit(source_name)),
        _header(prefix + HEADER_CREATED_AT, _iso_utc(created_at)),
    )


def _default_type(topics: CloudEventTopics, topic: Column) -> Column | None:
    """The default ce_type of `topic`'s rule, null where it gives none; None if no rule does."""
    by_type: dict[str, list[str]] = {}
    for name, default in topics:
        if default is not None:
            by_type.setdefault(default, []).append(name)
    chosen: Column | None = None
    for default, names in sorted(by_type.items()):
        cond = topic.isin(names)
        chosen = (F.when(cond, F.lit(default)) if chosen is None
                  else chosen.when(cond, F.lit(default)))
    return chosen


def cloudevent_headers(topics: CloudEventTopics, source_name: str, topic: Column,
                       outbox_id: Column, created_at: Column, user: Column) -> Column:
    """The CloudEvents attributes the relay writes (outbox_relay.rules.cloudevents) on a record of
    one of `topics`, none on another: ce_specversion, ce_id (the outbox id: unique per
    source, and ce_source is this relay's source_name), ce_source, ce_time (created_at,
    RFC 3339 in UTC like the reserved header), and the rule's default ce_type where the
    row's user headers (`user`, a map, null when none) have no ce_type. The claim already
    refused a row without any type and user headers named like the relay's attributes."""
    empty = F.array().cast(HEADERS_TYPE)
    attributes = F.array(
        _header(ce.CE_SPECVERSION, F.lit(ce.SPEC_VERSION)),
        _header(ce.CE_ID, outbox_id.cast("string")),
        _header(ce.CE_SOURCE, F.lit(source_name)),
        _header(ce.CE_TIME, _iso_utc(created_at)),
    )
    default = _default_type(topics, topic)
    if default is not None:
        has_type = F.coalesce(F.map_contains_key(user, ce.CE_TYPE), F.lit(False))
        typed = F.when(~has_type & default.isNotNull(), F.array(_header(ce.CE_TYPE, default)))
        attributes = F.concat(attributes, F.coalesce(typed, empty))
    return F.when(topic.isin([name for name, _ in topics]), attributes).otherwise(empty)


def user_headers(headers: Column) -> Column:
    """A map<string,string> of user headers as the sink's array of (key, binary value)."""
    return F.transform(F.map_entries(headers), lambda e: _header(e["key"], e["value"]))


def _headers(source_name: str, prefix: str, cloudevents: CloudEventTopics) -> Column:
    reserved = reserved_headers(source_name, prefix, F.col("id"), F.col("created_at"))
    # The claim already refused non-object headers, non-string values and reserved names.
    given = F.from_json(F.col("headers"), USER_HEADERS_TYPE)
    if cloudevents:  # no CloudEvents topic: the plan it always had
        reserved = F.concat(reserved, cloudevent_headers(
            cloudevents, source_name, F.col("topic").cast("string"), F.col("id"),
            F.col("created_at"), given))
    user = user_headers(given)
    return F.when(F.col("headers").isNull(), reserved).otherwise(F.concat(reserved, user))


def original_partition(partitioner: Partitioner) -> Column:
    """The partition of each row's partitioning bytes, whichever column they came from,
    among its topic's `partition_count` (read with the row, outbox_relay/schemas/0014); a
    keyless row's (no bytes) from its id (outbox_relay.direct.records.keyless_partition,
    so that both lanes place it alike); null for a topic whose partition count is not
    known.

    The record's explicit partition, and for a keyed row the ledger's: the ledger
    computes it from the same bytes and the count stored with the session
    (outbox_relay.ledger.delta)."""
    count = F.col("partition_count")
    keyed = partition_col(partitioner, partitioning_key_col(), count)
    return F.when(partitioning_key_col().isNull(), F.pmod(F.col("id"), count)).otherwise(keyed)


def to_kafka_records(
    claimed: DataFrame,
    *,
    source_name: str,
    header_prefix: str,
    partitioner: Partitioner,
    cloudevents: CloudEventTopics = (),
) -> DataFrame:
    """Claimed rows (in_key_order's columns) to records; those of `cloudevents`' topics
    with the CloudEvents attributes (cloudevent_headers)."""
    return claimed.select(*_record_columns(
        _active_context_id(), source_name, header_prefix, partitioner, cloudevents))


def _active_context_id() -> int:
    from pyspark import SparkContext

    return id(SparkContext._active_spark_context)


@functools.lru_cache(maxsize=32)
def _record_columns(
    context_id: int,
    source_name: str,
    header_prefix: str,
    partitioner: Partitioner,
    cloudevents: CloudEventTopics,
) -> tuple[Column, ...]:
    """The record columns, built once per settings and reused by every micro-batch:
    building them is hundreds of py4j calls (the murmur2 expression most), on the
    latency path of each batch. A Column is an unresolved expression, bound to no
    DataFrame, so reuse is safe; the context id keeps one SparkContext's from another,
    and the CloudEvents topics (which name topics in the headers' expression) one plan's
    from another's.
    """
    return (
        F.col("topic").cast("string").alias("topic"),
        F.col("key").cast("binary").alias("key"),
        F.col("message").cast("binary").alias("value"),
        _headers(source_name, header_prefix, cloudevents).alias("headers"),
        # Every keyed row is given its partition, from the count the claim stored, never
        # left to the producer: its metadata may hold another count while partitions are
        # added, and one key would then reach two partitions in one write. murmur2 of
        # the bytes is what the Java producer computes, so a count both agree on gives
        # the partition it would have chosen.
        original_partition(partitioner).cast("int").alias("partition"),
    )


def in_key_order(claimed: DataFrame) -> DataFrame:
    """Sort each task's rows by id. The read already keeps every key in one task."""
    return claimed.sortWithinPartitions("id").select(*CLAIMED_COLUMNS)

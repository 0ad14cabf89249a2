"""Per-topic transforms: a user's DataFrame -> DataFrame function between the read and
the sink, checked in every task before anything is sent.

The transform receives TRANSFORM_COLUMNS and must return them, with the same types
(docs/configuration.md, "Transforms"): it may change `value`, `headers` and `key`; it may
not add, drop, reorder or move rows, nor change `id`, `topic`, `created_at` or `_relay`.

`_relay` is how the relay checks that, inside the one write job and without a second read:
- before the transform, each row gets its task (`spark_partition_id`), its position in
  the task's id order, how many rows of the task come after it (a descending sort gives
  that, so no count needs a second pass), its id, topic, created_at, and its Kafka
  partition computed from the ORIGINAL partitioning bytes (so a changed key cannot move
  it to another partition; keyless rows keep a null partition);
- after it, every row must sit in the same task, at the same position, with the same id:
  a dropped, duplicated, reordered or moved row shifts some row off its place. A blocking
  sort consumes the whole task before anything reaches the sink; the task's last row
  must then have nothing after it, which catches a dropped last row;
- a task whose rows were ALL dropped sends nothing and has no row left to complain: a
  counter (`RowCounter`) gives the driver the number of rows that passed, which must equal
  what the claim holds, or the batch fails (and is not deleted).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, cast

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.functions import arrow_udf
from pyspark.sql.types import StructType

from outbox_relay.data.partitioning import Partitioner
from outbox_relay.data.records import (
    USER_HEADERS_TYPE,
    CloudEventTopics,
    cloudevent_headers,
    original_partition,
    reserved_headers,
    user_headers,
)
from outbox_relay.errors import ConfigError
from outbox_relay.rules import cloudevents as ce
from outbox_relay.rules.headers import is_reserved

Transform = Callable[[DataFrame], DataFrame]
RELAY_COLUMN = "_relay"
TRANSFORM_COLUMNS = ("id", "topic", "key", "value", "headers", "created_at", RELAY_COLUMN)
_POS = "_relay_pos"
_AFTER = "_relay_after"
_HERE = "_relay_here"


def load_transform(spec: str) -> Transform:
    """The function `spec` ("package.module:function") names; ConfigError if it
    cannot be imported or is not callable."""
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import failure: the message says which and why
        raise ConfigError(f"transform {spec}: cannot import {module_name}: "
                             f"{type(exc).__name__}: {exc}") from None
    fn = getattr(module, name, None)
    if fn is None or not callable(fn):
        raise ConfigError(f"transform {spec}: {module_name} has no function {name}")
    return fn


def _position() -> Column:
    """The row's index in its task, counted where this expression is evaluated.

    Each instance counts the rows IT sees: inside a CASE it would miss the rows of the
    branches not taken, so each use gets a column of its own, in a projection of its own
    (nondeterministic, so the optimizer never inlines it into another).
    """
    task = F.spark_partition_id().cast("bigint")
    return F.monotonically_increasing_id() - F.shiftleft(task, 33)


def transform_input(claimed: DataFrame, *, partitioner: Partitioner) -> DataFrame:
    """Claimed rows (in_key_order's columns) as the transform receives them."""
    counted = claimed.sortWithinPartitions(F.col("id").desc()).withColumn(_AFTER, _position())
    relay = F.struct(
        F.spark_partition_id().alias("task"),
        _position().alias("pos"),
        F.col(_AFTER).alias("after"),
        F.col("id").alias("id"),
        F.col("topic").cast("string").alias("topic"),
        F.col("created_at").alias("created_at"),
        original_partition(partitioner).cast("int").alias("partition"),
    )
    return counted.sortWithinPartitions("id").select(
        F.col("id"),
        F.col("topic").cast("string").alias("topic"),
        F.col("key").cast("binary").alias("key"),
        F.col("message").cast("binary").alias("value"),
        F.from_json(F.col("headers"), USER_HEADERS_TYPE).alias("headers"),
        F.col("created_at"),
        relay.alias(RELAY_COLUMN),
    )


def _check_schema(out: DataFrame, expected: StructType, spec: str) -> None:
    # Nullability aside: a map literal, say, is a map whose values cannot be null.
    got = {f.name: f.dataType.simpleString() for f in out.schema.fields}
    want = {f.name: f.dataType.simpleString() for f in expected.fields}
    if got != want or len(out.columns) != len(got):
        raise ConfigError(
            f"transform {spec} must return the columns it received, with their types: "
            f"{expected.simpleString()}; it returned {out.schema.simpleString()}")


def _fail_if(problems: list[tuple[Column, Column]], spec: str, value: Column) -> Column:
    """`value`, or a task failure naming the transform, the topic and the first problem."""
    where = F.concat(F.lit(f"transform {spec} broke its contract on topic "),
                     F.col(RELAY_COLUMN).topic, F.lit(": "))
    first: Column | None = None
    for cond, text in problems:
        first = F.when(cond, text) if first is None else first.when(cond, text)
    assert first is not None
    return F.when(first.isNotNull(), F.raise_error(F.concat(where, first))).otherwise(value)


def _row_problems(prefix: str) -> list[tuple[Column, Column]]:
    rel, row = F.col(RELAY_COLUMN), F.col("id").cast("string")
    here = F.col(_HERE)
    reserved = F.exists(F.coalesce(F.map_keys("headers"), F.array().cast("array<string>")),
                        lambda k: is_reserved(k, prefix))
    return [
        (rel.isNull(), F.lit("a row came back without its _relay column")),
        (rel.task != F.spark_partition_id(),
         F.concat(F.lit("row id "), row, F.lit(" moved from task "), rel.task.cast("string"),
                  F.lit(" to task "), F.spark_partition_id().cast("string"))),
        (~F.col("id").eqNullSafe(rel.id),
         F.concat(F.lit("id "), rel.id.cast("string"), F.lit(" came back as "),
                  F.coalesce(row, F.lit("NULL")))),
        (rel.pos != here,
         F.concat(F.lit("row id "), row, F.lit(" was read at position "),
                  rel.pos.cast("string"), F.lit(" of its task and came back at "),
                  here.cast("string"), F.lit(": a row was dropped, duplicated or reordered"))),
        (~F.col("topic").eqNullSafe(rel.topic), F.concat(F.lit("row id "), row,
                                                         F.lit(" changed its topic"))),
        (~F.col("created_at").eqNullSafe(rel.created_at),
         F.concat(F.lit("row id "), row, F.lit(" changed its created_at"))),
        (reserved, F.concat(F.lit("row id "), row, F.lit(f" has a header named {prefix}*: "
                                                         "the reserved headers are the relay's"))),
    ]


def _cloudevent_problems(topics: CloudEventTopics) -> list[tuple[Column, Column]]:
    """On a CloudEvents topic, what the claim refuses of a row (relay_cloudevents_problem),
    asked of the transform's headers: the transform may change ce_type, not lose it."""
    if not topics:
        return []
    row, topic = F.col("id").cast("string"), F.col(RELAY_COLUMN).topic
    on_topic = topic.isin([name for name, _ in topics])
    untyped = topic.isin([name for name, default in topics if default is None])
    names = F.coalesce(F.map_keys("headers"), F.array().cast("array<string>"))
    taken = F.exists(names, lambda k: k.isin(list(ce.RELAY_ATTRIBUTES)))
    has_type = F.coalesce(F.map_contains_key("headers", ce.CE_TYPE), F.lit(False))
    return [
        (on_topic & taken, F.concat(F.lit("row id "), row, F.lit(
            " has a header named like a CloudEvents attribute the relay writes "
            f"({', '.join(ce.RELAY_ATTRIBUTES)})"))),
        (on_topic & (F.element_at("headers", F.lit(ce.CE_TYPE)) == ""),
         F.concat(F.lit("row id "), row, F.lit(f" has an empty {ce.CE_TYPE} header"))),
        (untyped & ~has_type, F.concat(F.lit("row id "), row, F.lit(
            f" has no {ce.CE_TYPE} header on a CloudEvents topic without an event_type"))),
    ]


def checked_records(out: DataFrame, *, spec: str, expected: StructType, source_name: str,
                    header_prefix: str, counter: RowCounter,
                    cloudevents: CloudEventTopics = ()) -> DataFrame:
    """The transform's output as Kafka sink records, after the checks of the module doc;
    the records of `cloudevents`' topics with the CloudEvents attributes."""
    _check_schema(out, expected, spec)
    rel = F.col(RELAY_COLUMN)
    problems = _row_problems(header_prefix) + _cloudevent_problems(cloudevents)
    rows = out.withColumn(_HERE, _position()).select(
        "id", "topic", "key", "headers", "created_at", RELAY_COLUMN,
        _fail_if(problems, spec, F.col("value")).alias("value"),
        counter.counted(rel.pos).alias(_POS),
    )
    # Descending, the task's last row comes first, once the sort has consumed the task.
    last = F.concat(F.lit("the "), rel.after.cast("string"),
                    F.lit(" row(s) that followed id "), F.col("id").cast("string"),
                    F.lit(" in its task are missing: rows were dropped"))
    ended = rows.sortWithinPartitions(F.col(_POS).desc()).withColumn(_HERE, _position()).select(
        "id", "key", "headers", RELAY_COLUMN, _POS,
        _fail_if([((F.col(_HERE) == 0) & (rel.after != 0), last)], spec,
                 F.col("value")).alias("value"),
    )
    user = F.when(F.col("headers").isNull(), F.array()).otherwise(user_headers(F.col("headers")))
    relays = reserved_headers(source_name, header_prefix, rel.id, rel.created_at)
    if cloudevents:  # added after the transform, like the reserved headers
        relays = F.concat(relays, cloudevent_headers(cloudevents, source_name, rel.topic,
                                                     rel.id, rel.created_at, F.col("headers")))
    return ended.sortWithinPartitions(_POS).select(
        rel.topic.alias("topic"),
        F.col("key").cast("binary").alias("key"),
        F.col("value").cast("binary").alias("value"),
        F.concat(relays, user).alias("headers"),
        rel.partition.alias("partition"),
    )


class RowCounter:
    """Counts, on the executors, the rows that passed the checks: the driver compares the
    sum with what the claim holds after the write (a task emptied by the transform has no
    row left to fail on). An Arrow UDF on one bigint column: the payloads stay in the JVM.
    """

    def __init__(self, spark: SparkSession) -> None:
        self._acc = spark.sparkContext.accumulator(0)
        acc = self._acc

        def count(pos: pa.Array) -> pa.Array:
            acc.add(len(pos))
            return pos

        # pyspark's stubs know only the form that names the UDF type, which it then
        # warns about: the type comes from the hints.
        self.counted: Callable[[Column], Column] = cast(Any, arrow_udf)(count, "bigint")

    def reset(self) -> None:
        self._acc.value = 0

    def verify(self, expected: int, what: str) -> None:
        got = self._acc.value
        if got != expected:
            raise ConfigError(
                f"{what}: {got} row(s) came out of the transform, {expected} were claimed: "
                "a transform dropped every row of a task (nothing of that task was sent)")

"""The ledger's partition of each record and the operators' outcomes, on tiny inline data.

The partition comes from the record's partitioning bytes by the sink's own expression
(outbox_relay.data.partitioning.partition_col); the expected values come from the pure-Python
reference, which tests/spark/test_partitioning_expr.py pins to the real clients.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from outbox_relay.data.partitioning import partition_for
from outbox_relay.ledger.rows import LEDGER_COLUMNS, explode_staging
from outbox_relay.ledger.staging import kafka_partition

pytestmark = pytest.mark.spark

STAGED = (
    "copy_batch bigint, session_id string, topic string, outcome string, ids array<bigint>, "
    "source string, relayed_at timestamp, partitioning_keys array<binary>, "
    "topic_partitions int, partitioner string, actor string"
)
AT = dt.datetime(2026, 1, 2, 3, 4, 5)


def _ledger(spark: SparkSession, rows: list[tuple[object, ...]]) -> DataFrame:
    return spark.createDataFrame(rows, STAGED).transform(explode_staging, "o")


def test_each_published_row_gets_the_partition_of_its_own_bytes(spark: SparkSession) -> None:
    keys = [b"order-1", None, b"\x00\xff\x80", b"", "tenant-\u00e9".encode()]
    ids = [10, 11, 12, 13, 14]
    out = _ledger(spark, [
        (1, "s-m", "t", "published", ids, "src", AT, keys, 7, "murmur2", None),
        (1, "s-c", "t", "published", [20, 21], "src", AT, [b"order-1", None], 5, "crc32", None),
    ])
    assert tuple(out.columns) == LEDGER_COLUMNS
    got = {r.message_id: (r.kafka_partition, r.topic_partitions, r.partitioner)
           for r in out.collect()}
    expected = {i: (partition_for("murmur2", k, 7) if k is not None else None, 7, "murmur2")
                for i, k in zip(ids, keys, strict=True)}
    expected |= {20: (partition_for("crc32", b"order-1", 5), 5, "crc32"), 21: (None, 5, "crc32")}
    print("ledger partitions:", got)
    assert got == expected


def test_records_without_a_send_have_no_partition_and_operators_are_named(
    spark: SparkSession,
) -> None:
    out = _ledger(spark, [
        (2, "s-1", "t", "compacted", [1], "src", AT, None, None, None, None),
        (2, "s-2", "t", "skipped", [2, 3], "src", AT, None, None, None, "alice@host"),
        (2, "s-3", "t", "dropped", [4], "src", AT, None, None, None, "bob@host"),
        (2, "s-4", "t", "published", [5], "src", AT, None, None, None, None),  # before 0012
    ]).select("message_id", "outcome", "kafka_partition", "partitioner", "actor")
    expected = out.sparkSession.createDataFrame(
        [(1, "compacted", None, None, None), (2, "skipped", None, None, "alice@host"),
         (3, "skipped", None, None, "alice@host"), (4, "dropped", None, None, "bob@host"),
         (5, "published", None, None, None)],
        "message_id bigint, outcome string, kafka_partition int, partitioner string, "
        "actor string",
    )
    assert_df_equality(out, expected, ignore_nullable=True, ignore_row_order=True)


@pytest.mark.parametrize("partitioner", ["murmur2", "crc32"])
def test_the_staged_lookup_computes_what_the_delta_copy_computes(
    spark: SparkSession, partitioner: str,
) -> None:
    """`ledger show` answers from staging before the copy; both answers must agree."""
    rng = random.Random(11)
    keys: list[bytes | None] = [
        bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40))) for _ in range(300)
    ] + [None]
    rows = [(3, f"s-{n}", "t", "published", list(range(len(keys))), "src", AT, keys, n,
             partitioner, None) for n in (1, 3, 12, 1000)]
    delta = {(r.topic_partitions, r.message_id): r.kafka_partition
             for r in _ledger(spark, rows).collect()}
    staged = {(n, i): kafka_partition(partitioner, k, n)
              for n in (1, 3, 12, 1000) for i, k in enumerate(keys)}
    assert delta == staged


def test_a_drain_sized_copy_writes_every_row_without_carrying_the_arrays_along(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Sessions of 25,000 ids, as a bulk drain stages them. Each exploded row used to
    carry its session's whole keys array, and a 1M-row copy ran the driver out of a 2 GB
    heap (bench W1); now each row takes its own id and bytes."""
    per_session, sessions = 25_000, 4
    keys = [f"key-{i % 997}".encode() for i in range(per_session)]
    rows = [(9, f"s-{s}", "t", "published", list(range(s * per_session, (s + 1) * per_session)),
             "src", AT, keys, 12, "murmur2", None) for s in range(sessions)]
    path = str(tmp_path / "ledger")
    _ledger(spark, rows).write.format("delta").save(path)

    written = spark.read.format("delta").load(path)
    assert written.count() == per_session * sessions
    sample = {r.message_id: r.kafka_partition
              for r in written.where("message_id % 9973 = 0").collect()}
    assert sample == {i: partition_for("murmur2", keys[i % per_session], 12)
                      for i in range(0, per_session * sessions, 9973)}

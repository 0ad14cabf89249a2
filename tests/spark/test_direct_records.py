"""The direct lane's records (outbox_relay.direct.records) against the Spark lane's
(outbox_relay.data.records.to_kafka_records) on the same tiny inline rows: key, value,
headers in order, and partition, byte for byte, for every key shape, user headers in
jsonb's order, tombstones, CloudEvents topics with and without a default type, both
partitioners, and created_at texts with every fraction length; and a write of enough
rows that the direct lane hashes their keys with numpy (BULK_MIN_ROWS)."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession

from outbox_relay.data.records import to_kafka_records
from outbox_relay.direct.records import BULK_MIN_ROWS, ClaimedRow, iso_utc, to_records
from outbox_relay.rules.partitioners import partitioning_key

pytestmark = pytest.mark.spark

SCHEMA = ("id bigint, topic string, message binary, key binary, partition_key string, "
          "created_at string, headers string, partition_count int")
CLOUDEVENTS = {"ce": "order.placed", "ce-own": None}


def _rows() -> list[ClaimedRow]:
    texts = ["2026-01-02 03:04:05", "2026-01-02 03:04:05.1", "2026-12-31 23:59:59.123456",
             "1999-02-28 00:00:00.00001"]
    headers = [None, "{}", json.dumps({"a": "1", "traceparent": "00-ab-cd-01"}),
               json.dumps({"ce_type": "own.type", "k": "ü ✓"})]
    shapes: list[tuple[bytes | None, str | None]] = [
        (b"k1", None), (b"k1", "k1"), (b"k1", "other"), (None, None), (None, "pk"),
        (b"\xff\x00\x80", None), (b"", None), (None, ""),
    ]
    rows = []
    n = 0
    for topic, count in (("t", 4), ("ce", 3), ("ce-own", 5), ("unknown-count", None)):
        for key, pkey in shapes:
            n += 1
            value = None if n % 7 == 0 else f"v{n}".encode()
            rows.append(ClaimedRow(n * 37, topic, value, key, pkey, texts[n % len(texts)],
                                   headers[n % len(headers)], count))
    return rows


def _bulk_rows() -> list[ClaimedRow]:
    """The shapes of _rows, and distinct keys of every length 0-40, text and binary, as
    key or as partition_key, among the same partition counts."""
    rows = _rows()
    n = rows[-1].id
    for i in range(3 * BULK_MIN_ROWS):
        n += 1
        raw = bytes((i * 7 + j * 13) % 256 for j in range(i % 41))
        key, pkey = ((raw, None) if i % 3 == 0 else (b"k", f"pk-{i}-" + "é" * (i % 9))
                     if i % 3 == 1 else (None, f"only-{i}"))
        topic, count = (("t", 4), ("ce", 3), ("ce-own", 5), ("unknown-count", None))[i % 4]
        rows.append(ClaimedRow(n, topic, f"v{n}".encode(), key, pkey,
                               "2026-01-02 03:04:05.25", None, count))
    keys = {partitioning_key(r.partition_key, r.key) for r in rows}
    assert len(rows) >= BULK_MIN_ROWS and len(keys) >= BULK_MIN_ROWS, "a bulk write"
    return rows


@pytest.mark.parametrize("partitioner", ["murmur2", "crc32"])
@pytest.mark.parametrize("size", ["small", "bulk"])
def test_both_lanes_make_the_same_records(spark: SparkSession, partitioner: str,
                                          size: str) -> None:
    rows = _rows() if size == "small" else _bulk_rows()
    df = spark.createDataFrame(
        [(r.id, r.topic, r.message, r.key, r.partition_key, r.created_at, r.headers,
          r.partition_count) for r in rows], SCHEMA)
    spark_side = df.transform(to_kafka_records, source_name="src", header_prefix="p.",
                              partitioner=partitioner,
                              cloudevents=tuple(sorted(CLOUDEVENTS.items()))).collect()
    direct = to_records(rows, source_name="src", header_prefix="p.", partitioner=partitioner,
                        cloudevents=CLOUDEVENTS)
    assert len(spark_side) == len(direct) == len(rows)
    for s, d in zip(spark_side, direct, strict=True):
        got = (s.topic, s.key, s.value, [(h.key, bytes(h.value)) for h in s.headers],
               s.partition)
        want = (d.topic, d.key, d.value, d.headers, d.partition)
        assert got == want, f"row {d.id}"


def test_created_at_is_written_as_the_spark_lane_writes_it() -> None:
    assert iso_utc("2026-01-02 03:04:05") == "2026-01-02T03:04:05.000000Z"
    assert iso_utc("2026-01-02 03:04:05.1") == "2026-01-02T03:04:05.100000Z"
    assert iso_utc("2026-01-02 03:04:05.123456") == "2026-01-02T03:04:05.123456Z"
    with pytest.raises(ValueError, match="not a PostgreSQL timestamp"):
        iso_utc("2026-01-02T03:04:05")

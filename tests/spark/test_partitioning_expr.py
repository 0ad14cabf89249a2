"""The Spark partitioner expressions agree with the pure-Python references bit for bit."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from outbox_relay.data.partitioning import (
    murmur2,
    murmur2_col,
    partition_col,
    partition_for,
    partitioning_key,
    partitioning_key_col,
)
from outbox_relay.data.partitioning_arrow import murmur2_partition_col
from outbox_relay.rules.murmur2_bulk import murmur2_array, murmur2_partitions

pytestmark = pytest.mark.spark

KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# Published CRC-32 (ISO-HDLC, as zlib and librdkafka's rd_crc32) check values: 0xCBF43926
# is the catalogued check value of "123456789"; the others are the common test strings.
# librdkafka's `consistent` partitioner is crc32(key) % partitions (its live behaviour is
# pinned in tests/integration/test_partitioner_contract.py).
CRC32_VECTORS = {
    b"": 0x00000000,
    b"a": 0xE8B7BE43,
    b"abc": 0x352441C2,
    b"123456789": 0xCBF43926,
    b"message digest": 0x20159D7F,
    b"The quick brown fox jumps over the lazy dog": 0x414FA339,
}


def _signed(h: int) -> int:
    return h - 2**32 if h >= 2**31 else h


def test_python_murmur2_matches_kafka_test_vectors() -> None:
    for data, expected in KAFKA_VECTORS.items():
        assert _signed(murmur2(data)) == expected


@pytest.mark.parametrize("partitions", [1, 3, 7, 64])
def test_crc32_partition_matches_published_check_values(
    spark: SparkSession, partitions: int
) -> None:
    keys = list(CRC32_VECTORS)
    expected = {i: CRC32_VECTORS[k] % partitions for i, k in enumerate(keys)}
    assert {i: partition_for("crc32", k, partitions) for i, k in enumerate(keys)} == expected
    df = spark.createDataFrame(list(enumerate(keys)), "i int, k binary")
    rows = df.select("i", partition_col("crc32", F.col("k"), F.lit(partitions)).alias("p"))
    assert {r.i: r.p for r in rows.collect()} == expected


def _keys() -> list[bytes]:
    rng = random.Random(42)
    keys = [b"", b"a", b"ab", b"abc", b"\xff\xfe\x00\x80", "ключ-ü".encode()]
    keys += [rng.randbytes(rng.randrange(0, 70)) for _ in range(300)]
    return keys + list(KAFKA_VECTORS) + list(CRC32_VECTORS)


def test_murmur2_expression_matches_reference(spark: SparkSession) -> None:
    keys = _keys()
    df = spark.createDataFrame([(i, k) for i, k in enumerate(keys)], "i int, k binary")
    got = {r.i: r.h for r in df.select("i", murmur2_col(F.col("k")).alias("h")).collect()}
    assert got == {i: murmur2(k) for i, k in enumerate(keys)}


@pytest.mark.parametrize("partitioner", ["murmur2", "crc32"])
@pytest.mark.parametrize("partitions", [1, 3, 7, 64])
def test_partition_expression_matches_reference(
    spark: SparkSession, partitioner: str, partitions: int
) -> None:
    keys = _keys()
    df = spark.createDataFrame([(i, k) for i, k in enumerate(keys)], "i int, k binary")
    rows = df.select(
        "i", partition_col(partitioner, F.col("k"), F.lit(partitions)).alias("p")  # type: ignore[arg-type]
    ).collect()
    assert {r.i: r.p for r in rows} == {
        i: partition_for(partitioner, k, partitions) for i, k in enumerate(keys)  # type: ignore[arg-type]
    }


@pytest.mark.parametrize("partitions", [1, 3, 7, 64])
def test_arrow_murmur2_partition_matches_expression_and_reference(
    spark: SparkSession, partitions: int
) -> None:
    """The ledger copy's Arrow twin against the sink's expression and the reference, with
    NULL keys among them and a DataFrame big enough to reach the UDF in several batches."""
    keys: list[bytes | None] = [*_keys(), None] * 4
    df = spark.createDataFrame([(i, k) for i, k in enumerate(keys)], "i int, k binary")
    rows = df.repartition(3).select(
        "i",
        murmur2_partition_col(F.col("k"), F.lit(partitions)).alias("arrow"),
        partition_col("murmur2", F.col("k"), F.lit(partitions)).alias("expr"),
    ).collect()
    expected = {i: None if k is None else partition_for("murmur2", k, partitions)
                for i, k in enumerate(keys)}
    assert {r.i: r.arrow for r in rows} == expected
    assert {r.i: r.expr for r in rows} == expected


def test_arrow_murmur2_of_sliced_arrays_and_missing_counts() -> None:
    keys = _keys()
    array = pa.array(keys, pa.binary())
    assert murmur2_array(array).tolist() == [murmur2(k) for k in keys]
    assert murmur2_array(array.slice(7, 50)).tolist() == [murmur2(k) for k in keys[7:57]]
    assert murmur2_array(pa.array([], pa.binary())).tolist() == []
    counts = pa.array([3, None, 0, -1, 5], pa.int32())
    got = murmur2_partitions(pa.array([b"a", b"b", b"c", b"d", None], pa.binary()), counts)
    assert got.to_pylist() == [partition_for("murmur2", b"a", 3), None, None, None, None]


def test_null_key_has_no_partition(spark: SparkSession) -> None:
    df = spark.createDataFrame([(None,)], "k binary")
    assert df.select(partition_col("murmur2", F.col("k"), F.lit(3)).alias("p")).first().p is None  # type: ignore[union-attr]


# partition_key, key: NULLs, b'' and '', bytes that are not UTF-8, unicode, a partition_key
# equal to the key's text and one equal to another row's key.
PARTITIONING_ROWS: list[tuple[str | None, bytes | None, bytes | None]] = [
    (None, None, None), (None, b"", b""), ("", None, b""), ("", b"x", b""),
    (None, b"\xff\xfe", b"\xff\xfe"), ("k1", None, b"k1"), (None, b"k1", b"k1"),
    ("k1", b"k1", b"k1"), ("k1", b"other", b"k1"), ("other", b"k2", b"other"),
    ("ключ-ü🚀", b"\x80", "ключ-ü🚀".encode()), (None, b"\xc3\x28", b"\xc3\x28"),
    ("\\x41", None, b"\\x41"),
]


def test_partitioning_key_expression_and_reference_follow_the_rule(spark: SparkSession) -> None:
    df = spark.createDataFrame(
        [(i, p, k) for i, (p, k, _) in enumerate(PARTITIONING_ROWS)],
        "i int, partition_key string, key binary",
    )
    got = {r.i: r.b for r in df.select("i", partitioning_key_col().alias("b")).collect()}
    expected = {i: want for i, (_, _, want) in enumerate(PARTITIONING_ROWS)}
    assert {i: None if b is None else bytes(b) for i, b in got.items()} == expected
    assert {i: partitioning_key(p, k) for i, (p, k, _) in enumerate(PARTITIONING_ROWS)} == expected

"""The partitioning key, and Kafka partitioners bit-compatible with their clients.

The partitioning key is the bytes a record's partition comes from: ``partition_key`` as
UTF-8 when it is not null, else ``key`` (SQL: ``relay_partitioning_key``,
outbox_relay/schemas/0009). Rows with equal bytes are one key for ordering, whichever column the
bytes came from.

- ``murmur2``: the Java client's default for keyed records (and so Spark's sink):
  ``(murmur2(key) & 0x7fffffff) % partitions``.
- ``crc32``: librdkafka's ``consistent`` partitioner, which Deimos uses for
  ``partition_key``: ``crc32(key) % partitions``.

Each comes twice: a pure-Python reference (outbox_relay/rules/partitioners.py, no Spark) and a Spark
Column expression that runs on the executors without a Python worker. The expression
keeps every intermediate value of the 32-bit arithmetic in [0, 2**32) as a bigint: a
product of such a value and the 31-bit constant stays below 2**63, so Spark's ANSI
overflow checks never fire. murmur2 has a third form for bulk work off the latency path,
an Arrow UDF (outbox_relay/data/partitioning_arrow.py, the ledger copy's); tests pin all three.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from outbox_relay.rules.partitioners import MASK as _MASK
from outbox_relay.rules.partitioners import SEED as _SEED
from outbox_relay.rules.partitioners import M as _M
from outbox_relay.rules.partitioners import Partitioner, murmur2, partition_for, partitioning_key

# The pure-Python half, re-exported: importers of this module keep working.
__all__ = ["Partitioner", "murmur2", "partition_col", "partition_for", "partitioning_key",
           "partitioning_key_col"]


def partitioning_key_col(
    partition_key: Column | None = None, key: Column | None = None
) -> Column:
    """The partitioning bytes of each row, as a binary column (null when both are)."""
    pk = F.col("partition_key") if partition_key is None else partition_key
    k = F.col("key") if key is None else key
    return F.coalesce(F.encode(pk, "UTF-8"), k.cast("binary"))


def _mul(x: Column) -> Column:
    return (x * F.lit(_M)).bitwiseAND(F.lit(_MASK))


def _byte(hex_str: Column, index: Column) -> Column:
    """The unsigned value of byte `index` (0-based) of the data whose hex is `hex_str`."""
    return F.conv(F.substring(hex_str, index * 2 + 1, F.lit(2)), 16, 10).cast("bigint")


def murmur2_col(data: Column) -> Column:
    """Kafka's murmur2 of a binary column, as an unsigned 32-bit bigint.

    Each step after the fold over the 4-byte blocks (the tail bytes, the final mix) runs
    inside a one-element fold, so it names the running hash through a lambda variable:
    a reference, not a copy. Written as plain nested expressions, the tree held 32 copies
    of the block fold, and Spark analysed and generated code for all of them on every
    micro-batch: 1-3 s a batch, even when no row had a key (reports/performance-history.md, W2).
    """
    hx = F.hex(data)
    length = F.octet_length(data).cast("bigint")
    blocks = F.floor(length / 4).cast("int")
    indices = F.when(blocks > 0, F.sequence(F.lit(0), blocks - 1)).otherwise(
        F.array().cast("array<int>")
    )

    def block(h: Column, i: Column) -> Column:
        base = i * 4
        k = (
            _byte(hx, base)
            .bitwiseOR(F.shiftleft(_byte(hx, base + 1), 8))
            .bitwiseOR(F.shiftleft(_byte(hx, base + 2), 16))
            .bitwiseOR(F.shiftleft(_byte(hx, base + 3), 24))
        )
        k = _mul(k)
        k = k.bitwiseXOR(F.shiftright(k, 24))
        k = _mul(k)
        return _mul(h).bitwiseXOR(k)

    tail = (blocks * 4).cast("int")
    rem = length % 4
    steps: list[Callable[[Column], Column]] = [
        lambda h: F.when(rem >= 3, h.bitwiseXOR(F.shiftleft(_byte(hx, tail + 2), 16)))
        .otherwise(h),
        lambda h: F.when(rem >= 2, h.bitwiseXOR(F.shiftleft(_byte(hx, tail + 1), 8)))
        .otherwise(h),
        lambda h: F.when(rem >= 1, _mul(h.bitwiseXOR(_byte(hx, tail)))).otherwise(h),
        lambda h: _mul(h.bitwiseXOR(F.shiftright(h, 13))),
        lambda h: h.bitwiseXOR(F.shiftright(h, 15)),
    ]
    h = F.aggregate(indices, F.lit(_SEED).bitwiseXOR(length), block)
    for step in steps:
        h = F.aggregate(F.array(F.lit(0)), h, _ignoring_element(step))
    return h


def _ignoring_element(step: Callable[[Column], Column]) -> Callable[[Column, Column], Column]:
    return lambda acc, _x: step(acc)


def partition_col(partitioner: Partitioner, key: Column, partitions: Column) -> Column:
    """The partition of a binary key among `partitions`; null where the key is null."""
    if partitioner == "murmur2":
        hashed = murmur2_col(key).bitwiseAND(F.lit(0x7FFFFFFF))
    else:
        hashed = F.crc32(key)
    return F.when(key.isNull(), F.lit(None)).otherwise(hashed % partitions).cast("int")

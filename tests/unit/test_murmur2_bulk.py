"""The numpy murmur2 (outbox_relay.rules.murmur2_bulk) against the Python reference, which
the contract tests pin to the real clients; keys past LONG_KEY_BYTES included, as Kafka
allows them."""

from __future__ import annotations

import random

import pyarrow as pa

from outbox_relay.rules.murmur2_bulk import LONG_KEY_BYTES, murmur2_array, murmur2_partitions
from outbox_relay.rules.partitioners import murmur2, partition_for


def _keys() -> list[bytes | None]:
    rng = random.Random(50)
    keys: list[bytes | None] = [rng.randbytes(n) for n in range(80)]
    keys += [rng.randbytes(LONG_KEY_BYTES + d) for d in (-1, 0, 1, 2, 3)]
    keys += [b"x" * 5_000, rng.randbytes(1_000_000), None, b"", "é✓".encode()]
    rng.shuffle(keys)
    return keys


def test_every_length_hashes_as_the_python_murmur2_does() -> None:
    keys = _keys()
    got = murmur2_array(pa.array(keys, pa.binary())).tolist()
    assert got == [0 if k is None else murmur2(k) for k in keys]
    part = pa.array(keys, pa.binary()).slice(3, 40)
    assert murmur2_array(part).tolist() == [0 if k is None else murmur2(k) for k in keys[3:43]]


def test_partitions_follow_each_rows_count_and_are_null_where_unknown() -> None:
    keys = _keys()
    counts: list[int | None] = [(None, 0, -2, 1, 3, 7, 12)[i % 7] for i in range(len(keys))]
    got = murmur2_partitions(pa.array(keys, pa.binary()), pa.array(counts, pa.int64()))
    want = [partition_for("murmur2", k, c) if k is not None and c is not None and c > 0
            else None for k, c in zip(keys, counts, strict=True)]
    assert got.to_pylist() == want

"""The size check's arithmetic: Kafka's varints, codec bounds, reserved headers, caps."""

from __future__ import annotations

import gzip
import random

import pyarrow as pa
import pytest

from outbox_relay.config.load import build_config
from outbox_relay.errors import ConfigError
from outbox_relay.rules.record_size import (
    BATCH_HEADER,
    compressed_bound,
    payload_allowance,
    record_bytes,
    reserved_header_bytes,
    varint_size,
)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def test_varint_sizes_match_kafkas_zigzag_encoding() -> None:
    # ByteUtils.sizeOfVarint: zig-zag, then 7 bits a byte.
    assert [varint_size(n) for n in (0, 63, 64, 8191, 8192, 1_048_575, 1_048_576)] == [
        1, 1, 2, 2, 3, 3, 4]


def test_reserved_headers_are_counted_byte_for_byte() -> None:
    # "p.id" (4) + 20 digits, "p.source" (8) + "src" (3), "p.created-at" (12) + 27 chars,
    # each with a one-byte varint per length.
    assert reserved_header_bytes("p.", "src") == (1 + 4 + 1 + 20) + (1 + 8 + 1 + 3) + (
        1 + 12 + 1 + 27)
    assert reserved_header_bytes("p.", "ü") == reserved_header_bytes("p.", "ab")


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("n", [0, 1, 100, 65_536, 200_000])
def test_codec_bounds_cover_real_compressors_on_incompressible_bytes(codec: str, n: int) -> None:
    data = random.Random(n).randbytes(n)
    if codec == "gzip":
        real = len(gzip.compress(data))
    else:
        arrow = {"snappy": "snappy", "lz4": "lz4", "zstd": "zstd"}[codec]
        real = len(pa.compress(data, codec=arrow, asbytes=True))
    assert real <= compressed_bound(n, codec)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(("topic_limit", "request_limit"),
                         [(10_000, 1_048_576), (1_048_588, 1_048_576), (2_000_000, 50_000)])
def test_the_allowance_is_the_largest_payload_that_fits_both_limits(
    codec: str, topic_limit: int, request_limit: int
) -> None:
    allowance = payload_allowance(topic_limit, request_limit, codec, "outbox-relay.", "src")

    def fits(payload: int) -> bool:
        record = record_bytes(payload, "outbox-relay.", "src")
        return (BATCH_HEADER + record <= request_limit
                and BATCH_HEADER + compressed_bound(record, codec) <= topic_limit)

    assert fits(allowance) and not fits(allowance + 1)
    # Snappy's guaranteed bound is n/6 over; the other codecs' are within half a percent.
    share = 0.85 if codec == "snappy" and topic_limit < request_limit * 1.01 else 0.99
    assert allowance > share * min(topic_limit, request_limit) - 500


def test_nothing_fits_under_a_tiny_limit() -> None:
    assert payload_allowance(100, 1_048_576, "lz4", "outbox-relay.", "src") == 0


def test_longer_headers_leave_less_room() -> None:
    short = payload_allowance(50_000, 1_048_576, "lz4", "p.", "s")
    long = payload_allowance(50_000, 1_048_576, "lz4", "p" * 63 + ".", "s" * 200)
    assert short - long == reserved_header_bytes("p" * 63 + ".", "s" * 200) - \
        reserved_header_bytes("p.", "s")


@pytest.mark.parametrize(("key", "value"), [
    ("source_name", "s" * 201), ("source_name", "ü" * 101), ("header_prefix", "p" * 65),
    ("source_name", ""),
])
def test_source_name_and_header_prefix_are_capped(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"relay.{key}"):
        build_config({"relay": {key: value}}, env={})


def test_the_caps_themselves_are_allowed() -> None:
    config = build_config({"relay": {"source_name": "s" * 200, "header_prefix": "p" * 64}},
                          env={})
    assert len(config.relay.source_name) == 200

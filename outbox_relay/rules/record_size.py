"""How many payload bytes a record may carry so that Kafka accepts it, reserved headers included.

The claim compares each row's payload (message + key + user headers as JSON text) with a
per-topic allowance, before anything is sent. A record over a limit that only Kafka sees
would be refused after later batches of its partition may already be in, which can
reorder its key, so the allowance must leave room for everything Kafka counts:

- The Java producer (Spark's sink) refuses a record whose batch estimate exceeds
  ``max.request.size``: a 61-byte batch header plus the record's upper bound
  (``DefaultRecordBatch.estimateBatchSizeUpperBound``), uncompressed.
- The broker refuses a batch larger than the topic's ``max.message.bytes``, measured after
  compression. For incompressible bytes a codec only adds its own framing, bounded below.

User headers are counted as their JSON text, never shorter than their Kafka framing (each
header costs at least six JSON characters of quotes, colon and separator, against at most
six bytes of varints below 2 MB). The reserved headers are counted exactly, with the
longest id and timestamp they can hold.

SQL twin: ``relay_message_problem`` and the claim's pre-filter compare the payload with the
allowance computed here; tests/integration/test_record_size.py and test_rules_contract.py
pin the two together at the boundary.
"""

from __future__ import annotations

import functools
from typing import Final

from outbox_relay.rules.headers import CREATED_AT_CHARS, HEADER_CREATED_AT, HEADER_ID, HEADER_SOURCE

BATCH_HEADER = 61  # RECORD_BATCH_OVERHEAD
RECORD_OVERHEAD = 21  # MAX_RECORD_OVERHEAD: length, attributes, timestamp and offset deltas
MAX_VARINT = 5  # the varint of a key, value or header-count length, at most
ID_CHARS = 20  # a bigint in decimal, sign included
# A broker's message.max.bytes unless configured otherwise, and so a topic's
# max.message.bytes: the limit an application assumes when it knows no other.
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
# The defaults of kafka.max_request_size (Kafka's own) and kafka.compression_type
# (outbox_relay.config), which the publisher's default allowance assumes.
DEFAULT_MAX_REQUEST_SIZE = 1_048_576
DEFAULT_COMPRESSION: Final = "lz4"


def payload_size(message: bytes | None, key: bytes | None, headers_json: str | None) -> int:
    """The relay's measure of a row, which the allowance bounds: message + key + user
    headers as the JSON text PostgreSQL prints, each NULL counting 0 (SQL twin:
    ``relay_message_size``, outbox_relay/schemas/0015_one_message_check.sql)."""
    return len(message or b"") + len(key or b"") + len((headers_json or "").encode())


def varint_size(n: int) -> int:
    """Bytes of Kafka's zig-zag varint encoding of a non-negative int."""
    zigzag = n << 1
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def header_bytes(name: str, value_bytes: int) -> int:
    """One Kafka record header, framing included, for a value of `value_bytes` bytes."""
    key = len(name.encode())
    return varint_size(key) + key + varint_size(value_bytes) + value_bytes


def reserved_header_bytes(prefix: str, source_name: str) -> int:
    """The three reserved headers, framing included, for the longest id and timestamp."""
    return (
        header_bytes(prefix + HEADER_ID, ID_CHARS)
        + header_bytes(prefix + HEADER_SOURCE, len(source_name.encode()))
        + header_bytes(prefix + HEADER_CREATED_AT, CREATED_AT_CHARS)
    )


def record_bytes(payload: int, prefix: str, source_name: str) -> int:
    """Upper bound of one record inside a batch, uncompressed, for `payload` bytes."""
    framing = RECORD_OVERHEAD + 3 * MAX_VARINT  # key length, value length, header count
    return framing + reserved_header_bytes(prefix, source_name) + payload


def compressed_bound(n: int, codec: str) -> int:
    """The most bytes `codec` can turn `n` incompressible bytes into, as Kafka frames them."""
    if codec == "none":
        return n
    if codec == "gzip":  # zlib's deflateBound, plus the gzip header and trailer
        return n + (n >> 12) + (n >> 14) + (n >> 25) + 13 + 18
    if codec == "snappy":  # snappy's 32 + n + n/6 per 32 KB block, 4-byte block lengths
        blocks = -(-n // 32_768) or 1
        return 16 + n + n // 6 + 36 * blocks
    if codec == "lz4":  # LZ4_compressBound per 64 KB block, 4-byte block sizes, frame
        blocks = -(-n // 65_536) or 1
        return n + n // 255 + 20 * blocks + 15
    if codec == "zstd":  # ZSTD_COMPRESSBOUND, plus frame header and checksum
        small = (131_072 - n) >> 11 if n < 131_072 else 0
        return n + (n >> 8) + small + 32
    raise ValueError(f"unknown compression codec {codec!r}")


@functools.lru_cache(maxsize=1024)  # asked for every topic of every micro-batch
def payload_allowance(
    max_message_bytes: int, max_request_size: int, codec: str, prefix: str, source_name: str
) -> int:
    """The largest payload the claim may let through for a topic (0 if nothing fits)."""

    def fits(payload: int) -> bool:
        record = record_bytes(payload, prefix, source_name)
        return (
            BATCH_HEADER + record <= max_request_size
            and BATCH_HEADER + compressed_bound(record, codec) <= max_message_bytes
        )

    lo, hi = 0, max(max_message_bytes, max_request_size)
    if not fits(lo):
        return 0
    while lo < hi:  # the bounds grow with the payload: the largest that fits, by bisection
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo

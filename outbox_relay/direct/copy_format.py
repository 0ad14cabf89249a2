"""PostgreSQL's binary COPY format, as `COPY (...) TO STDOUT (FORMAT binary)` writes it
(PostgreSQL's docs, "COPY", "Binary Format"): a header, one tuple per row, a trailer.

Each tuple is a 16-bit field count, then each field as a 32-bit length (-1: NULL) and
that many bytes in the type's binary form: a bytea's own bytes, a text's in the
connection's client encoding, an integer big-endian. Integers here are bigint only:
the statements cast theirs, so a field's width never depends on a table's own type.
"""

from __future__ import annotations

import struct

from outbox_relay.errors import DatabaseError

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
TRAILER = b"\xff\xff"
_FLAGS_WITH_OIDS = 1 << 16

int32 = struct.Struct("!i").unpack_from
int64 = struct.Struct("!q").unpack_from


class CopyFormatError(DatabaseError):
    """What PostgreSQL sent is not the binary COPY the statement asked for."""


def body(data: bytes) -> tuple[int, int]:
    """The offsets where the tuples of `data` start and end: past the header (signature,
    flags and its extension), before the trailer."""
    if not data.startswith(SIGNATURE) or len(data) < len(SIGNATURE) + 8 + len(TRAILER):
        raise CopyFormatError("not PostgreSQL's binary COPY format (no signature)")
    (flags,) = int32(data, len(SIGNATURE))
    if flags & _FLAGS_WITH_OIDS:
        raise CopyFormatError("binary COPY with OIDs: not asked for")
    (extension,) = int32(data, len(SIGNATURE) + 4)
    start = len(SIGNATURE) + 8 + extension
    if extension < 0 or not data.endswith(TRAILER) or start > len(data) - len(TRAILER):
        raise CopyFormatError("binary COPY without its trailer: truncated")
    return start, len(data) - len(TRAILER)


def ended(pos: int, end: int) -> None:
    """Checks that the last tuple ended where the trailer starts."""
    if pos != end:
        raise CopyFormatError(f"binary COPY's tuples end at byte {pos}, its trailer at {end}")

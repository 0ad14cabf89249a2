"""The direct lane's parse of PostgreSQL's binary COPY (outbox_relay.direct.copy_format,
outbox_relay.direct.read.claimed_rows) on buffers built here from the format as
PostgreSQL's docs state it; tests/integration/test_direct_read.py reads the server's own."""

from __future__ import annotations

import struct

import pytest

from outbox_relay.direct.copy_format import CopyFormatError
from outbox_relay.direct.read import claimed_rows
from outbox_relay.direct.records import ClaimedRow

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


def _field(value: object) -> bytes:
    if value is None:
        return struct.pack("!i", -1)
    if isinstance(value, int):
        return struct.pack("!iq", 8, value)
    raw = value if isinstance(value, bytes) else str(value).encode("utf-8")
    return struct.pack("!i", len(raw)) + raw


def _copy(rows: list[tuple[object, ...]], *, flags: int = 0, extension: bytes = b"",
          trailer: bytes = b"\xff\xff") -> bytes:
    out = SIGNATURE + struct.pack("!ii", flags, len(extension)) + extension
    for row in rows:
        out += struct.pack("!h", len(row)) + b"".join(_field(v) for v in row)
    return out + trailer


ROWS = [
    ClaimedRow(1, "orders", b'{"n":1}', b"k-1", None, "2026-12-07 03:00:00", None, 3),
    ClaimedRow(2, "orders", None, None, "pk-ü", "2026-12-07 03:00:00.5", '{"a": "✓"}', 3),
    ClaimedRow(2**63 - 1, "other", bytes(range(256)), b"", "", "2026-12-07 03:00:01.000001",
               "{}", None),
    ClaimedRow(-(2**63), "other", b"", b"\x00\xff", None, "2026-12-07 03:00:02", None, 1),
]


def test_every_field_shape_is_read_back_as_written() -> None:
    assert claimed_rows(_copy([tuple(r) for r in ROWS]), "utf-8") == ROWS


def test_no_rows_and_a_header_extension_are_read() -> None:
    assert claimed_rows(_copy([]), "utf-8") == []
    data = _copy([tuple(ROWS[0])], extension=b"\x00\x01\x02")
    assert claimed_rows(data, "utf-8") == ROWS[:1]


def test_text_is_decoded_with_the_connections_codec() -> None:
    latin = "pk-é".encode("latin-1")
    data = _copy([(7, "t", b"v", None, latin, "2026-12-07 03:00:00", None, None)])
    assert claimed_rows(data, "latin-1")[0].partition_key == "pk-é"
    with pytest.raises(CopyFormatError, match="cannot be read"):
        claimed_rows(data, "utf-8")


@pytest.mark.parametrize(("data", "says"), [
    (b"COPY" + _copy([])[4:], "no signature"),
    (_copy([], flags=1 << 16), "OIDs"),
    (_copy([tuple(ROWS[0])], trailer=b""), "trailer"),
    (_copy([tuple(ROWS[0])])[:-9] + b"\xff\xff", "cannot be read|end at byte"),
    (_copy([tuple(ROWS[0])[:7]]), "7 fields"),
    (_copy([(ROWS[0].id, None, *tuple(ROWS[0])[2:])]), "no topic"),
    (_copy([(*tuple(ROWS[0])[:5], None, *tuple(ROWS[0])[6:])]), "no created_at"),
    (_copy([tuple(ROWS[0])])[:-2] + b"\x00" + b"\xff\xff", "cut short at byte"),
])
def test_a_malformed_copy_is_refused_with_what_is_wrong(data: bytes, says: str) -> None:
    with pytest.raises(CopyFormatError, match=says):
        claimed_rows(data, "utf-8")


def test_integers_of_another_width_are_refused() -> None:
    good = _copy([tuple(ROWS[0])])
    start = len(SIGNATURE) + 8 + 2
    narrow_id = good[:start] + struct.pack("!ii", 4, 1) + good[start + 12:]
    with pytest.raises(CopyFormatError, match="an id of 4 bytes"):
        claimed_rows(narrow_id, "utf-8")
    narrow_count = good[:-14] + struct.pack("!ii", 4, 3) + b"\xff\xff"
    with pytest.raises(CopyFormatError, match="partition count of 4 bytes"):
        claimed_rows(narrow_count, "utf-8")

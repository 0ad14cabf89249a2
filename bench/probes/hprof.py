"""The byte arrays of a heap dump (HPROF, `jcmd GC.heap_dump`), by length.

A class histogram counts `byte[]` as one class. W4 needs one kind of them apart: the
Kafka producer's pooled record batches. Its BufferPool keeps every freed buffer of
exactly `batch.size` bytes for reuse, up to `buffer.memory`, so what it holds is the most
batches that were ever open at once: a high-water mark of the drain's bursts, not a
figure that grows per message. Counting the arrays of exactly that length names it.
"""

from __future__ import annotations

import mmap
import struct
from collections import Counter
from pathlib import Path

_HEAP_DUMP, _HEAP_DUMP_SEGMENT = 0x0C, 0x1C
_PRIMITIVE_ARRAY, _OBJECT_ARRAY, _INSTANCE, _CLASS = 0x23, 0x22, 0x21, 0x20
_BYTE = 8
# Basic type -> size; 2 (an object) is the identifier size.
_SIZES = {4: 1, 5: 2, 6: 4, 7: 8, 8: 1, 9: 2, 10: 4, 11: 8}


class HprofError(ValueError):
    pass


def byte_array_lengths(path: Path) -> Counter[int]:
    """length -> how many `byte[]` of that length the dump holds."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        end_of_name = m.find(b"\0")
        if not m[:end_of_name].startswith(b"JAVA PROFILE"):
            raise HprofError(f"{path} is not an HPROF heap dump")
        (ids,) = struct.unpack_from(">I", m, end_of_name + 1)
        pos = end_of_name + 1 + 4 + 8
        found: Counter[int] = Counter()
        while pos < len(m):
            tag, _, length = struct.unpack_from(">BII", m, pos)
            pos += 9
            if tag in (_HEAP_DUMP, _HEAP_DUMP_SEGMENT):
                _segment(m, pos, pos + length, ids, found)
            pos += length
        return found


# Root records: the bytes after the tag, by tag, as (identifiers, then plain bytes).
_ROOTS = {0xFF: (1, 0), 0x01: (2, 0), 0x02: (1, 8), 0x03: (1, 8), 0x04: (1, 4),
          0x05: (1, 0), 0x06: (1, 4), 0x07: (1, 0), 0x08: (1, 8)}


def _segment(m: mmap.mmap, pos: int, end: int, ids: int, found: Counter[int]) -> None:
    sizes = {**_SIZES, 2: ids}
    while pos < end:
        tag = m[pos]
        pos += 1
        if tag == _PRIMITIVE_ARRAY:
            n, kind = struct.unpack_from(">IB", m, pos + ids + 4)
            if kind == _BYTE:
                found[n] += 1
            pos += ids + 9 + n * sizes[kind]
        elif tag == _OBJECT_ARRAY:
            (n,) = struct.unpack_from(">I", m, pos + ids + 4)
            pos += ids + 8 + ids + n * ids
        elif tag == _INSTANCE:
            (n,) = struct.unpack_from(">I", m, pos + 2 * ids + 4)
            pos += 2 * ids + 8 + n
        elif tag == _CLASS:
            pos = _skip_class(m, pos, sizes, ids)
        elif tag in _ROOTS:
            refs, plain = _ROOTS[tag]
            pos += refs * ids + plain
        else:
            raise HprofError(f"unknown heap dump record 0x{tag:02x} at byte {pos - 1}")


def _skip_class(m: mmap.mmap, pos: int, sizes: dict[int, int], ids: int) -> int:
    pos += 7 * ids + 4 + 4  # class, stack serial, super, loader, signers, domain, 2 reserved
    (count,) = struct.unpack_from(">H", m, pos)
    pos += 2
    for _ in range(count):  # constant pool: index, type, value
        pos += 3 + sizes[m[pos + 2]]
    (count,) = struct.unpack_from(">H", m, pos)
    pos += 2
    for _ in range(count):  # static fields: name, type, value
        pos += ids + 1 + sizes[m[pos + ids]]
    (count,) = struct.unpack_from(">H", m, pos)
    return pos + 2 + count * (ids + 1)  # instance fields: name, type

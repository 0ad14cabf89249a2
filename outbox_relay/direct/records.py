"""A claimed row as the Kafka record the relay sends: the direct lane's twin of the Spark
lane's record columns (outbox_relay.data.records), pinned to them byte for byte by
tests/spark/test_direct_records.py and, through a consumer, by
tests/integration/test_lane_contract.py.

Key and value are the row's bytes; the headers are the reserved ones (outbox_relay.rules.
headers), a CloudEvents topic's attributes (outbox_relay.rules.cloudevents), then the
row's own in the order PostgreSQL's jsonb text gives them; the partition is explicit:
a keyed row's from its partitioning bytes (outbox_relay.rules.partitioners), a keyless
row's from its id (keyless_partition), both among the partition count the claim stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from outbox_relay.rules import cloudevents as ce
from outbox_relay.rules.headers import HEADER_CREATED_AT, HEADER_ID, HEADER_SOURCE
from outbox_relay.rules.partitioners import Partitioner, partition_for, partitioning_key

Header = tuple[str, bytes]
# PostgreSQL's text of a `timestamp without time zone` (ISO DateStyle): the fraction's
# trailing zeros are dropped, and a whole second has none.
_PG_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?$")
# Rows a write needs before its partitions are hashed by numpy (_murmur2_partitions).
BULK_MIN_ROWS = 256


# Tuples, not frozen dataclasses: the lane makes two per row, and a frozen dataclass's
# __init__ cost the driver's Python a twentieth of its time in MANY (8 databases' rows
# share its one interpreter).
class ClaimedRow(NamedTuple):
    """A row of the current batch, as the driver reads it (outbox_relay.direct.read)."""

    id: int
    topic: str
    message: bytes | None
    key: bytes | None
    partition_key: str | None
    created_at: str  # PostgreSQL's text of the value, as the Spark lane reads it too
    headers: str | None  # jsonb as text
    partition_count: int | None


class Record(NamedTuple):
    id: int
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[Header]
    partition: int | None


def iso_utc(created_at: str) -> str:
    """`yyyy-MM-ddTHH:mm:ss.ffffffZ` from PostgreSQL's text of a UTC wall clock, as the
    Spark lane's `_iso_utc` builds it (text only: no time zone takes part)."""
    match = _PG_TIMESTAMP.match(created_at)
    if match is None:
        raise ValueError(f"not a PostgreSQL timestamp: {created_at!r}")
    day, time, fraction = match.groups()
    return f"{day}T{time}.{(fraction or '').ljust(6, '0')}Z"


def keyless_partition(outbox_id: int, partitions: int) -> int:
    """A keyless record's partition: its id modulo the count, on both lanes (Spark's
    `pmod`), so that where it lands depends on neither lane's producer."""
    return outbox_id % partitions


def _cloudevent_headers(row: ClaimedRow, source: bytes, created: bytes,
                        default_type: str | None, own: Mapping[str, str]) -> list[Header]:
    attributes = [
        (ce.CE_SPECVERSION, ce.SPEC_VERSION.encode()),
        (ce.CE_ID, str(row.id).encode()),
        (ce.CE_SOURCE, source),
        (ce.CE_TIME, created),
    ]
    if default_type is not None and ce.CE_TYPE not in own:
        attributes.append((ce.CE_TYPE, default_type.encode()))
    return attributes


def _maker(source_name: str, header_prefix: str, partitioner: Partitioner,
           cloudevents: Mapping[str, str | None]
           ) -> Callable[[ClaimedRow, int | None], Record]:
    """A row's record, given its partition if already known, with what every row of a
    write shares worked out once: the reserved headers' names, the source's bytes, each
    partitioning key's partition (keys repeat) and each creation time's text (the rows
    of one transaction share it)."""
    id_name, source_header = header_prefix + HEADER_ID, header_prefix + HEADER_SOURCE
    created_name = header_prefix + HEADER_CREATED_AT
    source = source_name.encode()
    created_texts: dict[str, bytes] = {}
    partitions: dict[tuple[bytes, int], int] = {}

    def partition(row: ClaimedRow) -> int | None:
        count = row.partition_count
        if count is None:
            return None  # not known: the producer chooses, as the Spark lane leaves it
        pkey = partitioning_key(row.partition_key, row.key)
        if pkey is None:
            return keyless_partition(row.id, count)
        found = partitions.get((pkey, count))
        if found is None:
            found = partitions[pkey, count] = partition_for(partitioner, pkey, count)
        return found

    def make(row: ClaimedRow, known: int | None) -> Record:
        created = created_texts.get(row.created_at)
        if created is None:
            created = created_texts[row.created_at] = iso_utc(row.created_at).encode()
        headers: list[Header] = [(id_name, b"%d" % row.id), (source_header, source),
                                 (created_name, created)]
        if row.headers is not None or row.topic in cloudevents:
            own: dict[str, str] = json.loads(row.headers) if row.headers is not None else {}
            if row.topic in cloudevents:
                headers += _cloudevent_headers(row, source, created, cloudevents[row.topic],
                                               own)
            headers += [(name, value.encode()) for name, value in own.items()]
        return Record(row.id, row.topic, row.key, row.message, headers,
                      partition(row) if known is None else known)

    return make


def to_records(rows: Sequence[ClaimedRow], *, source_name: str, header_prefix: str,
               partitioner: Partitioner,
               cloudevents: Mapping[str, str | None]) -> list[Record]:
    """The records of `rows`, in order; `cloudevents` maps each CloudEvents topic to its
    rule's default ce_type (None: the row's own only)."""
    make = _maker(source_name, header_prefix, partitioner, cloudevents)
    if partitioner == "murmur2" and len(rows) >= BULK_MIN_ROWS:
        return [make(r, p) for r, p in zip(rows, _murmur2_partitions(rows), strict=True)]
    return [make(r, None) for r in rows]


def _murmur2_partitions(rows: Sequence[ClaimedRow]) -> list[int | None]:
    """Each keyed row's murmur2 partition among its positive partition count, hashed by
    numpy at once (None for the others, whose record finds its own): one Python murmur2
    a key cost the lane a sixth of its time when a write's keys were mostly distinct.
    Only from BULK_MIN_ROWS rows: numpy's fixed costs outweigh it below."""
    # Imported here so that this module alone needs neither; a relay has both loaded
    # from its start (the ledger's delta-rs writer, through outbox_relay.wiring).
    import pyarrow as pa

    from outbox_relay.rules.murmur2_bulk import murmur2_partitions

    keys = pa.array([partitioning_key(r.partition_key, r.key) for r in rows], pa.binary())
    counts = pa.array([r.partition_count for r in rows], pa.int64())
    partitions: list[int | None] = murmur2_partitions(keys, counts).to_pylist()
    return partitions

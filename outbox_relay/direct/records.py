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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from outbox_relay.rules import cloudevents as ce
from outbox_relay.rules.headers import HEADER_CREATED_AT, HEADER_ID, HEADER_SOURCE
from outbox_relay.rules.partitioners import Partitioner, partition_for, partitioning_key

Header = tuple[str, bytes]
# PostgreSQL's text of a `timestamp without time zone` (ISO DateStyle): the fraction's
# trailing zeros are dropped, and a whole second has none.
_PG_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?$")


@dataclass(frozen=True, slots=True)
class ClaimedRow:
    """A row of the current batch, as the driver reads it (outbox_relay.direct.read)."""

    id: int
    topic: str
    message: bytes | None
    key: bytes | None
    partition_key: str | None
    created_at: str  # PostgreSQL's text of the value, as the Spark lane reads it too
    headers: str | None  # jsonb as text
    partition_count: int | None


@dataclass(frozen=True, slots=True)
class Record:
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


def partition_of(row: ClaimedRow, partitioner: Partitioner) -> int | None:
    if row.partition_count is None:
        return None  # not known: the producer chooses, as the Spark lane leaves it
    pkey = partitioning_key(row.partition_key, row.key)
    if pkey is None:
        return keyless_partition(row.id, row.partition_count)
    return partition_for(partitioner, pkey, row.partition_count)


def _cloudevent_headers(row: ClaimedRow, source_name: str, created: str,
                        default_type: str | None, own: Mapping[str, str]) -> list[Header]:
    attributes = [
        (ce.CE_SPECVERSION, ce.SPEC_VERSION.encode()),
        (ce.CE_ID, str(row.id).encode()),
        (ce.CE_SOURCE, source_name.encode()),
        (ce.CE_TIME, created.encode()),
    ]
    if default_type is not None and ce.CE_TYPE not in own:
        attributes.append((ce.CE_TYPE, default_type.encode()))
    return attributes


def to_record(row: ClaimedRow, *, source_name: str, header_prefix: str,
              partitioner: Partitioner,
              cloudevents: Mapping[str, str | None]) -> Record:
    """The record of `row`; `cloudevents` maps each CloudEvents topic to its rule's default
    ce_type (None: the row's own only)."""
    created = iso_utc(row.created_at)
    own: dict[str, str] = json.loads(row.headers) if row.headers is not None else {}
    headers: list[Header] = [
        (header_prefix + HEADER_ID, str(row.id).encode()),
        (header_prefix + HEADER_SOURCE, source_name.encode()),
        (header_prefix + HEADER_CREATED_AT, created.encode()),
    ]
    if row.topic in cloudevents:
        headers += _cloudevent_headers(row, source_name, created, cloudevents[row.topic], own)
    headers += [(name, value.encode()) for name, value in own.items()]
    return Record(row.id, row.topic, row.key, row.message, headers,
                  partition_of(row, partitioner))


def to_records(rows: Sequence[ClaimedRow], *, source_name: str, header_prefix: str,
               partitioner: Partitioner,
               cloudevents: Mapping[str, str | None]) -> list[Record]:
    return [to_record(r, source_name=source_name, header_prefix=header_prefix,
                      partitioner=partitioner, cloudevents=cloudevents) for r in rows]

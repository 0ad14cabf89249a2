"""Looks a message up in the ledger without Spark: the Delta table through deltalake
(delta-rs), the staged records through the control connection.

`ledger show` must answer in seconds and start no JVM, so nothing here imports pyspark.
The Delta read prunes files on their min/max statistics of message_id: the copies
append ids in about the order the outbox handed them out, so few files can hold a
given id, and only those are opened (bench/probes/ledger_lookup.py measures it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from outbox_relay.control.db import Database
from outbox_relay.ledger import staging
from outbox_relay.ledger.delta_read import columns_of, open_table, query

if TYPE_CHECKING:
    from deltalake import DeltaTable

# The columns a record is described by; those of migration 0012 (the partition, and who
# skipped or dropped it) exist only in ledgers copied since, and `origin` in newer ones.
BASE_COLUMNS = ("topic", "message_id", "outcome", "session_id", "source", "relayed_at")
OPTIONAL_COLUMNS = ("kafka_partition", "topic_partitions", "partitioner", "actor")


@dataclass(frozen=True)
class LedgerRecord:
    """One record of a message: where it went, when, in which session, by whom."""

    topic: str
    message_id: int
    outcome: str
    session_id: str
    source: str
    relayed_at: datetime | None
    where: str  # "delta", or "staging" (not yet copied)
    kafka_partition: int | None = None  # None when keyless, unsent, or unknown
    topic_partitions: int | None = None
    partitioner: str | None = None  # None: recorded before the ledger kept partitions
    actor: str | None = None  # the operator's user@host, for skipped and dropped

    @property
    def partition_known(self) -> bool:
        """Whether the ledger recorded this send's partitioning at all; if it did, a
        published record without a partition was keyless (the producer chose)."""
        return self.partitioner is not None


# The one value in the text is an integer formatted as one (outbox_relay.ledger.delta_read);
# strings (topic, origin) are compared in Python on the few rows of that id.
DELTA_ROWS = "SELECT {columns} FROM ledger WHERE message_id = {message_id:d}"


def delta_records(
    table: DeltaTable, message_id: int, topic: str | None, origin: str
) -> list[LedgerRecord]:
    """The message's rows in Delta that this outbox wrote (or that predate `origin`)."""
    names = columns_of(table)
    columns = [c for c in (*BASE_COLUMNS, *OPTIONAL_COLUMNS, "origin") if c in names]
    statement = DELTA_ROWS.format(
        columns=", ".join(f'"{c}"' for c in columns), message_id=int(message_id)
    )
    return [
        _record(r, "delta")
        for r in query(table, statement, columns)
        if (topic is None or r["topic"] == topic) and r.get("origin") in (None, origin)
    ]


def staged_records(db: Database, message_id: int, topic: str | None) -> list[LedgerRecord]:
    """The message's records still staged in PostgreSQL, not yet copied to Delta."""
    return [_record(r, "staging") for r in staging.staged_for(db, topic, message_id)]


def _record(row: Mapping[str, Any], where: str) -> LedgerRecord:
    """From a Delta row or a staged one, which name their fields alike; a column an older
    ledger lacks reads as None."""
    return LedgerRecord(
        topic=str(row["topic"]), message_id=int(row["message_id"]),
        outcome=str(row["outcome"]), session_id=str(row["session_id"]),
        source=str(row["source"]), relayed_at=row["relayed_at"], where=where,
        **{c: row.get(c) for c in OPTIONAL_COLUMNS},
    )


def lookup(
    db: Database,
    path: str,
    message_id: int,
    topic: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> list[LedgerRecord]:
    """Every record of the message, copied (Delta) first, then staged, each by time.

    Staging is read before the Delta table is opened: a copy in between then shows a
    record in both (told apart and kept once, as copied), where the other order could
    find it in neither.
    """
    staged = staged_records(db, message_id, topic)
    return merged(staged, copied_records(db, path, message_id, topic, storage_options))


def copied_records(
    db: Database,
    path: str,
    message_id: int,
    topic: str | None,
    storage_options: Mapping[str, str] | None = None,
) -> list[LedgerRecord]:
    """The message's records in the Delta table (none before the first copy)."""
    table = open_table(path, storage_options)
    if table is None:
        return []
    return delta_records(table, message_id, topic, staging.origin(db))


def merged(staged: list[LedgerRecord], copied: list[LedgerRecord]) -> list[LedgerRecord]:
    """Copied records by time, then the staged ones not copied meanwhile."""
    seen = {_identity(r) for r in copied}
    by_time = sorted(copied, key=lambda r: (r.relayed_at is None, r.relayed_at or 0, r.topic))
    return by_time + [r for r in staged if _identity(r) not in seen]


def _identity(record: LedgerRecord) -> tuple[str, str, str]:
    """A record of one message: one session's outcome for it in one topic."""
    return record.session_id, record.topic, record.outcome

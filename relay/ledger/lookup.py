"""Looks a message up in the ledger without Spark: the Delta table through deltalake
(delta-rs), the staged records through the control connection.

`ledger show` must answer in seconds and start no JVM, so nothing here imports pyspark.
The Delta read prunes files on their min/max statistics of message_id: the copies
append ids in about the order the outbox handed them out, so few files can hold a
given id, and only those are opened (bench/ledger_lookup.py measures it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from relay.control.db import Database
from relay.errors import ConfigError, RelayError
from relay.ledger import staging

if TYPE_CHECKING:
    from deltalake import DeltaTable

# The columns a record is described by; `partition` and `actor` exist only in ledgers
# written by relays that know skip and drop, and `origin` only in newer ones.
BASE_COLUMNS = ("topic", "message_id", "outcome", "session_id", "source", "relayed_at")
OPTIONAL_COLUMNS = ("partition", "actor")


@dataclass(frozen=True)
class LedgerRecord:
    """One record of a message: where it went, when, in which session, by whom."""

    topic: str
    message_id: int
    outcome: str
    relayed_at: datetime | None
    session_id: str
    source: str
    where: str  # "staged" (not yet copied) or "delta"
    # Whether the ledger records partitions at all (older ledgers do not); if it does,
    # None means the row was keyless and the producer chose its partition.
    partition_known: bool = False
    partition: int | None = None
    actor: str | None = None


def is_local(path: str) -> bool:
    """A path on this machine (no URL scheme, or file://), as opposed to object storage."""
    scheme = urlparse(path).scheme
    return scheme in ("", "file") or len(scheme) == 1  # a Windows drive letter


def open_table(path: str, storage_options: Mapping[str, str] | None = None) -> DeltaTable | None:
    """The Delta table at `path`, or None when nothing was copied there yet.

    A local path that holds files but no Delta log is refused: `ledger.path` names
    something else, and answering "no record" would hide that. On object storage an
    absent table and a non-Delta prefix look alike to delta-rs; both read as absent.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    if is_local(path):
        local = Path(urlparse(path).path if path.startswith("file:") else path)
        log = local / "_delta_log"
        if not local.exists() or (local.is_dir() and not any(local.iterdir())):
            return None
        if not local.is_dir() or not log.is_dir():
            raise ConfigError(f"ledger.path: {path} is not a Delta table (no _delta_log)")
        if not any(p.suffix in (".json", ".parquet") for p in log.iterdir()):
            return None  # a first copy that never committed
    try:
        return DeltaTable(path, storage_options=dict(storage_options or {}))
    except TableNotFoundError:
        if is_local(path):
            raise ConfigError(f"ledger.path: {path} is not a readable Delta table") from None
        return None
    except (DeltaError, OSError) as exc:
        raise RelayError(f"cannot read the Delta ledger at {path}: {_first_line(exc)}") from None


# DataFusion SQL through deltalake's QueryBuilder: it reads what delta-spark writes
# (deletion vectors and column mapping included, which deltalake's pyarrow datasets
# refuse) and prunes files on message_id's statistics. It takes no bound parameters, so
# the one value in the text is an integer formatted as one (`:d` cannot carry SQL);
# strings (topic, origin) are compared in Python on the few rows of that id.
DELTA_ROWS = "SELECT {columns} FROM ledger WHERE message_id = {message_id:d}"


def delta_records(
    table: DeltaTable, message_id: int, topic: str | None, origin: str
) -> list[LedgerRecord]:
    """The message's rows in Delta that this outbox wrote (or that predate `origin`)."""
    from deltalake import QueryBuilder
    from deltalake.exceptions import DeltaError

    names = {f.name for f in table.schema().fields}
    columns = [c for c in (*BASE_COLUMNS, *OPTIONAL_COLUMNS, "origin") if c in names]
    statement = DELTA_ROWS.format(
        columns=", ".join(f'"{c}"' for c in columns), message_id=int(message_id)
    )
    try:
        found = QueryBuilder().register("ledger", table).execute(statement).read_all()
    except DeltaError as exc:
        raise RelayError(f"cannot read the Delta ledger: {_first_line(exc)}") from None
    values = {c: found.column(c).to_pylist() for c in columns}
    rows = [{c: values[c][i] for c in columns} for i in range(found.num_rows)]
    return [
        _record(r, "delta", "partition" in names)
        for r in rows
        if (topic is None or r["topic"] == topic) and r.get("origin") in (None, origin)
    ]


def _first_line(exc: BaseException) -> str:
    """delta-rs appends a native backtrace to its messages; the first line says what."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def staged_records(db: Database, message_id: int, topic: str | None) -> list[LedgerRecord]:
    """The message's records still staged in PostgreSQL, not yet copied to Delta."""
    return [
        _record(r, "staged", bool(r["has_partition"]), message_id)
        for r in staging.staged_for(db, topic, message_id)
    ]


def _record(
    row: Mapping[str, Any], where: str, partition_known: bool, message_id: int | None = None
) -> LedgerRecord:
    return LedgerRecord(
        topic=str(row["topic"]),
        message_id=int(row["message_id"] if message_id is None else message_id),
        outcome=str(row["outcome"]),
        relayed_at=row["relayed_at"],
        session_id=str(row["session_id"]),
        source=str(row["source"]),
        where=where,
        partition_known=partition_known,
        partition=row.get("partition"),
        actor=row.get("actor"),
    )


def lookup(
    db: Database,
    path: str,
    message_id: int,
    topic: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> list[LedgerRecord]:
    """Every record of the message, copied (Delta) first, then staged, each by time."""
    table = open_table(path, storage_options)
    copied = (
        delta_records(table, message_id, topic, staging.origin(db)) if table is not None else []
    )
    by_time = sorted(copied, key=lambda r: (r.relayed_at is None, r.relayed_at or 0, r.topic))
    return by_time + staged_records(db, message_id, topic)

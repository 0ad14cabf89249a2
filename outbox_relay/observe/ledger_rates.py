"""Ledger rows per topic over the rate windows, read from Delta with delta-rs (no JVM).

Staged records that a copy already wrote to Delta stay in staging until the copier
removes them; those batches are counted from staging only, so no message counts twice.
Rows of other outboxes sharing the ledger path (another `origin`) are left out; rows
written before `origin` existed can't be told apart and count, as `ledger show` does.
`counts_here` is that rule; the rates here and the per-minute series
(outbox_relay.observe.throughput) both apply it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from outbox_relay.errors import RelayError
from outbox_relay.ledger.delta_read import columns_of, open_table, query
from outbox_relay.observe.queries import DELTA_RATES, ORIGIN_COLUMNS


@dataclass(frozen=True)
class DeltaCounts:
    """Messages per topic in each window; `error` says why Delta was not read."""

    last_5m: Counter[str] = field(default_factory=Counter)
    last_60m: Counter[str] = field(default_factory=Counter)
    exists: bool = False
    version: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class DeltaRows:
    """The rows of one aggregate over the Delta ledger; `error` says why none were read."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    exists: bool = False
    version: int | None = None
    error: str | None = None


def counts_here(row_origin: str | None, batch: int | None, origin: str,
                staged_batches: Collection[int]) -> bool:
    """Whether a Delta row counts for the outbox `origin`: its own rows (or rows older than
    `origin`), except batches still staged, which are counted from staging."""
    return row_origin is None or (row_origin == origin and batch not in staged_batches)


def read_delta(path: str, statement: Callable[[str], str], columns: Sequence[str]) -> DeltaRows:
    """Runs `statement(origin_expression)` over the Delta ledger, or says why it could not:
    the status must answer whatever state the ledger is in.

    The expression is one of ORIGIN_COLUMNS: a ledger written before rows carried their
    origin has no such column. A missing table is no error (nothing copied yet)."""
    try:
        table = open_table(path)
    except RelayError as exc:
        return DeltaRows(error=str(exc))
    if table is None:
        return DeltaRows()
    try:
        rows = query(table, statement(ORIGIN_COLUMNS["origin" in columns_of(table)]), columns)
    except RelayError as exc:
        return DeltaRows(exists=True, version=table.version(), error=str(exc))
    return DeltaRows(rows, exists=True, version=table.version())


def delta_counts(path: str, since_5m_us: int, since_60m_us: int, origin: str,
                 staged_batches: Collection[int]) -> DeltaCounts:
    """The ledger's Delta rows per topic relayed since each cut-off (µs since the epoch,
    from the database's clock)."""
    read = read_delta(
        path,
        lambda origin_column: DELTA_RATES.format(
            origin=origin_column, since_5m_us=int(since_5m_us), since_60m_us=int(since_60m_us)),
        ("origin", "topic", "copy_batch", "n5", "n60"),
    )
    last_5m: Counter[str] = Counter()
    last_60m: Counter[str] = Counter()
    skip = set(staged_batches)
    for row in read.rows:
        if counts_here(row["origin"], row["copy_batch"], origin, skip):
            last_5m[row["topic"]] += int(row["n5"])
            last_60m[row["topic"]] += int(row["n60"])
    return DeltaCounts(last_5m, last_60m, exists=read.exists, version=read.version,
                       error=read.error)

"""Ledger rows per topic over the rate windows, read from Delta with delta-rs (no JVM).

Staged records that a copy already wrote to Delta stay in staging until the copier
removes them; those batches are counted from staging only, so no message counts twice.
Rows of other outboxes sharing the ledger path (another `origin`) are left out; rows
written before `origin` existed can't be told apart and count, as `ledger show` does.
`counts_here` is that rule; the rates here and the per-minute series
(relay.observe.throughput) both apply it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from relay.observe.queries import DELTA_RATES, ORIGIN_COLUMNS


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


def table_uri(path: str) -> str:
    """A local path made absolute (as Spark resolves it, from the working directory);
    a URL (s3://, abfss://, file://) as it is."""
    return path if urlsplit(path).scheme else str(Path(path).resolve())


def counts_here(row_origin: str | None, batch: int | None, origin: str,
                staged_batches: Collection[int]) -> bool:
    """Whether a Delta row counts for the outbox `origin`: its own rows (or rows older than
    `origin`), except batches still staged, which are counted from staging."""
    return row_origin is None or (row_origin == origin and batch not in staged_batches)


def read_delta(path: str, statement: Callable[[str], str], columns: Sequence[str]) -> DeltaRows:
    """Runs `statement(origin_expression)` over the table registered as `ledger`.

    The expression is one of ORIGIN_COLUMNS: a ledger written before rows carried their
    origin has no such column. A missing table is no error (nothing copied yet)."""
    try:
        from deltalake import DeltaTable, QueryBuilder
        from deltalake.exceptions import TableNotFoundError
    except ImportError as exc:  # pragma: no cover - a base dependency
        return DeltaRows(error=f"deltalake is not installed: {exc}")
    try:
        table = DeltaTable(table_uri(path))
    except TableNotFoundError:
        return DeltaRows()
    except Exception as exc:  # delta-rs raises several kinds; the status must still answer
        return DeltaRows(error=f"cannot open the Delta ledger: {_first_line(exc)}")
    has_origin = "origin" in {f.name for f in table.schema().fields}
    try:
        result = (QueryBuilder().register("ledger", table)
                  .execute(statement(ORIGIN_COLUMNS[has_origin])).read_all())
    except Exception as exc:
        return DeltaRows(exists=True, version=table.version(),
                         error=f"cannot read the Delta ledger: {_first_line(exc)}")
    values = [result.column(name).to_pylist() for name in columns]
    rows = [dict(zip(columns, row, strict=True)) for row in zip(*values, strict=True)]
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


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__

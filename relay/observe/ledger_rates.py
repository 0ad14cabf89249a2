"""Ledger rows per topic over the rate windows, read from Delta with delta-rs (no JVM).

Staged records that a copy already wrote to Delta stay in staging until the copier
removes them; those batches are counted from staging only, so no message counts twice.
Rows of other outboxes sharing the ledger path (another `origin`) are left out; rows
written before `origin` existed can't be told apart and count, as `ledger show` does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
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


def table_uri(path: str) -> str:
    """A local path made absolute (as Spark resolves it, from the working directory);
    a URL (s3://, abfss://, file://) as it is."""
    return path if urlsplit(path).scheme else str(Path(path).resolve())


def delta_counts(path: str, since_5m_us: int, since_60m_us: int, origin: str,
                 staged_batches: Collection[int]) -> DeltaCounts:
    """The ledger's Delta rows per topic relayed since each cut-off (µs since the epoch,
    from the database's clock)."""
    try:
        from deltalake import DeltaTable, QueryBuilder
        from deltalake.exceptions import TableNotFoundError
    except ImportError as exc:  # pragma: no cover - a base dependency
        return DeltaCounts(error=f"deltalake is not installed: {exc}")
    try:
        table = DeltaTable(table_uri(path))
    except TableNotFoundError:
        return DeltaCounts()  # nothing copied yet
    except Exception as exc:  # delta-rs raises several kinds; the status must still answer
        return DeltaCounts(error=f"cannot open the Delta ledger: {_first_line(exc)}")
    has_origin = "origin" in {f.name for f in table.schema().fields}
    statement = DELTA_RATES.format(origin=ORIGIN_COLUMNS[has_origin],
                                   since_5m_us=int(since_5m_us), since_60m_us=int(since_60m_us))
    try:
        result = QueryBuilder().register("ledger", table).execute(statement).read_all()
    except Exception as exc:
        return DeltaCounts(exists=True, version=table.version(),
                           error=f"cannot read the Delta ledger: {_first_line(exc)}")
    columns = {name: result.column(name).to_pylist()
               for name in ("origin", "topic", "copy_batch", "n5", "n60")}
    last_5m: Counter[str] = Counter()
    last_60m: Counter[str] = Counter()
    skip = set(staged_batches)
    for row_origin, topic, batch, n5, n60 in zip(*columns.values(), strict=True):
        if row_origin not in (None, origin) or (row_origin == origin and batch in skip):
            continue
        last_5m[topic] += int(n5)
        last_60m[topic] += int(n60)
    return DeltaCounts(last_5m, last_60m, exists=True, version=table.version())


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__

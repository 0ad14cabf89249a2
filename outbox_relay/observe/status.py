"""One snapshot of the outbox's health: what `status`, the metrics and the notebook show.

All of it is read in one read-only REPEATABLE READ transaction, so every count, age and
state belongs to one instant of the database's clock. The Delta ledger is read after it,
with delta-rs, only when the caller wants the rates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from psycopg2.extras import RealDictCursor

from outbox_relay.control.db import Database
from outbox_relay.ledger.staging import ORIGIN
from outbox_relay.observe import queries
from outbox_relay.observe.backlog import (
    COUNT_BUDGET,
    EXACT_UP_TO,
    Backlog,
    Span,
    backlog_of,
    count_limits,
)
from outbox_relay.observe.ledger_rates import DeltaCounts, delta_counts

STATES = ("ready", "locked", "backoff")


@dataclass(frozen=True)
class Lock:
    by: str
    since: datetime | None
    alive: bool  # renewed within the lock timeout by a holder not gone: no relay takes it
    holder_gone: bool = False  # its process is certainly gone: takeable at once (issue 52)


@dataclass(frozen=True)
class TopicError:
    last_error: str | None
    retry_at: datetime | None
    retry_in_s: float


@dataclass(frozen=True)
class TopicLedger:
    per_min_5m: float = 0.0
    per_min_60m: float = 0.0
    staged_records: int = 0
    staged_messages: int = 0
    oldest_staged_at: datetime | None = None
    oldest_staged_age_s: float | None = None


@dataclass(frozen=True)
class TopicStatus:
    topic: str
    state: str  # one of STATES
    backlog: int
    backlog_exact: bool
    oldest_id: int | None
    oldest_created_at: datetime | None
    oldest_age_s: float | None
    max_wait_s: float
    last_processed_at: datetime | None
    lock: Lock | None
    retries: int
    error: TopicError | None
    parked: int
    ledger: TopicLedger


@dataclass(frozen=True)
class LedgerStatus:
    path: str
    delta_read: bool
    delta_exists: bool
    delta_version: int | None
    delta_error: str | None
    staged_records: int
    staged_messages: int
    oldest_staged_at: datetime | None
    oldest_staged_age_s: float | None


@dataclass(frozen=True)
class Horizon:
    kind: str  # backend | prepared | replication_slot
    pid: int | None
    name: str | None
    state: str | None
    since: datetime | None
    age_s: float | None
    xid_age: int | None
    wrote: bool  # holds a transaction id, not only a snapshot


@dataclass(frozen=True)
class QueueTable:
    live_tuples: int
    dead_tuples: int
    last_autovacuum: datetime | None
    last_vacuum: datetime | None
    autovacuum_count: int


@dataclass(frozen=True)
class Snapshot:
    generated_at: datetime
    lock_timeout_s: float
    topics: list[TopicStatus]
    ledger: LedgerStatus
    horizon: Horizon | None
    queue_table: QueueTable | None


def utc(value: datetime | None) -> datetime | None:
    """An aware UTC datetime: naive ones are UTC by the schema's convention."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def take_snapshot(db: Database, lock_timeout_s: float, ledger_path: str,
                  with_rates: bool = True, exact_up_to: int = EXACT_UP_TO,
                  count_budget: int = COUNT_BUDGET) -> Snapshot:
    """Reads the outbox's state; with `with_rates`, the Delta ledger's rows too."""
    with db.transaction() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        clock = _one(cur, queries.CLOCK)
        rows = _all(cur, queries.TOPICS, {"lock_timeout_s": lock_timeout_s})
        backlogs = _backlogs(cur, rows, exact_up_to, count_budget)
        staged = {r["topic"]: r for r in _all(cur, queries.STAGED)}
        origin = str(_one(cur, ORIGIN)["origin"])
        horizon = _all(cur, queries.HORIZON)
        table = _all(cur, queries.QUEUE_TABLE)
    batches = {b for r in staged.values() for b in r["copy_batches"]}
    delta: DeltaCounts | None = None
    if with_rates:
        delta = delta_counts(ledger_path, clock["since_5m_us"], clock["since_60m_us"], origin,
                             batches)
    in_delta = (delta.last_5m, delta.last_60m) if delta else (Counter[str](), Counter[str]())
    topics = [_topic(r, backlogs.get(r["topic"], Backlog(0, True)),
                     _topic_ledger(staged.get(r["topic"]), in_delta[0][r["topic"]],
                                   in_delta[1][r["topic"]]))
              for r in rows]
    return Snapshot(
        generated_at=utc(clock["now"]) or datetime.now(UTC),
        lock_timeout_s=lock_timeout_s,
        topics=topics,
        ledger=_ledger(ledger_path, staged.values(), delta),
        horizon=Horizon(**horizon[0]) if horizon else None,
        queue_table=QueueTable(**table[0]) if table else None,
    )


def _all(cur: RealDictCursor, statement: str, params: Any = None) -> list[dict[str, Any]]:
    cur.execute(statement, params)
    return [dict(r) for r in cur.fetchall()]


def _one(cur: RealDictCursor, statement: str) -> dict[str, Any]:
    rows = _all(cur, statement)
    assert rows, "the statement returns one row"
    return rows[0]


def _backlogs(cur: RealDictCursor, rows: list[dict[str, Any]], exact_up_to: int,
              budget: int) -> dict[str, Backlog]:
    spans = {r["topic"]: Span(r["oldest_id"], r["newest_id"])
             for r in rows if r["oldest_id"] is not None}
    if not spans:
        return {}
    limits = count_limits(spans, exact_up_to, budget)
    for setting in queries.COUNT_PLAN:
        cur.execute(setting)
    counted = _all(cur, queries.COUNT_HEADS,
                   {"topics": list(limits), "limits": list(limits.values())})
    return {c["topic"]: backlog_of(spans[c["topic"]], limits[c["topic"]], c["n"], c["last_id"])
            for c in counted}


def _topic(r: dict[str, Any], backlog: Backlog, ledger: TopicLedger) -> TopicStatus:
    lock = (Lock(r["locked_by"], utc(r["locked_at"]), r["lock_alive"], r["holder_gone"])
            if r["locked_by"] is not None else None)
    error = (TopicError(r["last_error"], utc(r["retry_at"]), r["retry_in_s"] or 0.0)
             if r["error"] else None)
    state = "locked" if lock else "backoff" if r["in_backoff"] else "ready"
    return TopicStatus(
        topic=r["topic"], state=state, backlog=backlog.messages, backlog_exact=backlog.exact,
        oldest_id=r["oldest_id"], oldest_created_at=utc(r["oldest_created_at"]),
        oldest_age_s=r["oldest_age_s"],
        max_wait_s=max(0.0, r["max_wait_s"] or 0.0) if r["oldest_id"] is not None else 0.0,
        last_processed_at=utc(r["last_processed_at"]), lock=lock, retries=r["retries"],
        error=error, parked=int(r["parked"]), ledger=ledger,
    )


def _topic_ledger(staged: dict[str, Any] | None, delta_5m: int, delta_60m: int) -> TopicLedger:
    """Ledger records per minute: the staged ones and Delta's (no batch in both)."""
    if staged is None:
        return TopicLedger(per_min_5m=delta_5m / 5, per_min_60m=delta_60m / 60)
    return TopicLedger(
        per_min_5m=(staged["messages_5m"] + delta_5m) / 5,
        per_min_60m=(staged["messages_60m"] + delta_60m) / 60,
        staged_records=staged["records"], staged_messages=staged["messages"],
        oldest_staged_at=utc(staged["oldest_at"]), oldest_staged_age_s=staged["oldest_age_s"],
    )


def _ledger(path: str, staged: Iterable[dict[str, Any]],
            delta: DeltaCounts | None) -> LedgerStatus:
    records = list(staged)
    oldest = min(records, key=lambda r: r["oldest_at"], default=None)
    return LedgerStatus(
        path=path,
        delta_read=delta is not None,
        delta_exists=bool(delta and delta.exists),
        delta_version=delta.version if delta else None,
        delta_error=delta.error if delta else None,
        staged_records=sum(r["records"] for r in records),
        staged_messages=sum(r["messages"] for r in records),
        oldest_staged_at=utc(oldest["oldest_at"]) if oldest else None,
        oldest_staged_age_s=oldest["oldest_age_s"] if oldest else None,
    )

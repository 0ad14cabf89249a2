"""Messages published per minute per topic over a window (the notebook's 24 hours), from
the ledger.

The staged records in PostgreSQL and the Delta table (through delta-rs) together, with
the rates' rule for what counts once (outbox_relay.observe.ledger_rates.counts_here). Minutes
are whole minutes since the epoch on the database's clock, so both sources bucket alike.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from outbox_relay.control.db import Database
from outbox_relay.ledger.staging import LEFTOVER_BATCHES, ORIGIN
from outbox_relay.observe import queries
from outbox_relay.observe.ledger_rates import counts_here, read_delta

DAY_MINUTES = 24 * 60


@dataclass(frozen=True)
class PerMinute:
    """`counts[topic][minute]`: messages published in that minute (their ledger record's
    time), for minutes first_minute .. first_minute + minutes - 1 since the epoch."""

    generated_at: datetime
    first_minute: int
    minutes: int
    counts: dict[str, dict[int, int]] = field(default_factory=dict)
    delta_read: bool = False
    delta_error: str | None = None

    @property
    def last_minute(self) -> int:
        return self.first_minute + self.minutes - 1


def per_minute(db: Database, ledger_path: str, minutes: int = DAY_MINUTES,
               with_delta: bool = True) -> PerMinute:
    """The series of the last `minutes` minutes, the current one included."""
    if minutes < 1:
        raise ValueError(f"minutes must be at least 1, got {minutes}")
    with db.transaction() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cur.execute(queries.SERIES_CLOCK, {"minutes": minutes})
        clock = dict(cur.fetchone())
        first = int(clock["first_minute"])
        cur.execute(queries.STAGED_PER_MINUTE, {"first_minute": first})
        staged = [dict(r) for r in cur.fetchall()]
        cur.execute(LEFTOVER_BATCHES)
        batches = {int(r["copy_batch"]) for r in cur.fetchall()}
        cur.execute(ORIGIN)
        origin = str(cur.fetchone()["origin"])
    counts: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    last = first + minutes - 1

    def add(topic: str, minute: int, n: int) -> None:
        # A record committed after the clock was read may land in the next minute.
        if first <= minute <= last:
            counts[topic][minute] += n

    for r in staged:
        add(r["topic"], int(r["minute"]), int(r["messages"]))
    error = None
    if with_delta:
        read = read_delta(
            ledger_path,
            lambda origin_column: queries.DELTA_PER_MINUTE.format(
                origin=origin_column, since_us=first * 60 * 1_000_000),
            ("origin", "topic", "copy_batch", "minute", "messages"),
        )
        error = read.error
        for r in read.rows:
            if counts_here(r["origin"], r["copy_batch"], origin, batches):
                add(r["topic"], int(r["minute"]), int(r["messages"]))
    now = clock["now"]
    return PerMinute(
        generated_at=now.astimezone(UTC) if now.tzinfo else now.replace(tzinfo=UTC),
        first_minute=first, minutes=minutes,
        counts={t: dict(m) for t, m in counts.items()},
        delta_read=with_delta, delta_error=error,
    )

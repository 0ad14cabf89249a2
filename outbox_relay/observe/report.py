"""A snapshot as JSON (stable field names, ISO 8601 UTC times), as a terminal table, and
judged against the monitoring thresholds. Pure functions: no database here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from outbox_relay.observe.status import Snapshot, TopicStatus

FAIL_ON_CHOICES = ("backoff", "parked")
JSON_VERSION = 1


def iso(value: datetime) -> str:
    """ISO 8601 in UTC with a `Z`, microseconds kept."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Thresholds:
    max_age_s: float | None = None
    fail_on: frozenset[str] = frozenset()


def parse_fail_on(text: str) -> frozenset[str]:
    """`backoff,parked` -> the set; an unknown or empty item is a ValueError naming it."""
    items = [item.strip() for item in text.split(",")]
    bad = [item for item in items if item not in FAIL_ON_CHOICES]
    if bad:
        raise ValueError(f"unknown --fail-on item(s) {', '.join(repr(b) for b in bad)}; "
                         f"choose from {', '.join(FAIL_ON_CHOICES)}")
    return frozenset(items)


def problems(snapshot: Snapshot, thresholds: Thresholds) -> list[str]:
    """One line per threshold a topic crosses; empty when healthy."""
    out: list[str] = []
    for t in snapshot.topics:
        if (thresholds.max_age_s is not None and t.oldest_age_s is not None
                and t.oldest_age_s > thresholds.max_age_s):
            out.append(f"topic {t.topic!r}: oldest message is {t.oldest_age_s:.0f} s old "
                       f"(over --max-age-s {thresholds.max_age_s:g})")
        if "backoff" in thresholds.fail_on and t.state == "backoff" and t.error:
            out.append(f"topic {t.topic!r}: in backoff after {t.retries} retries, next in "
                       f"{t.error.retry_in_s:.0f} s: {t.error.last_error or '(no error text)'}")
        if "parked" in thresholds.fail_on and t.parked:
            out.append(f"topic {t.topic!r}: {t.parked} parked message(s)")
    return out


def to_json(snapshot: Snapshot, thresholds: Thresholds) -> dict[str, Any]:
    found = problems(snapshot, thresholds)
    data = asdict(snapshot)
    return _plain({
        "version": JSON_VERSION,
        **data,
        "healthy": not found,
        "problems": found,
        "thresholds": {"max_age_s": thresholds.max_age_s,
                       "fail_on": sorted(thresholds.fail_on)},
    })


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def _backlog(t: TopicStatus) -> str:
    return f"{t.backlog:,}" if t.backlog_exact else f"~{t.backlog:,}"


def _detail(t: TopicStatus) -> str:
    if t.lock:
        alive = ("alive" if t.lock.alive else
                 "HOLDER GONE" if t.lock.holder_gone else "EXPIRED")
        since = t.lock.since.strftime("%H:%M:%S") if t.lock.since else "?"
        return f"by {t.lock.by} since {since} ({alive})"
    if t.error:
        until = t.error.retry_at.strftime("%H:%M:%S") if t.error.retry_at else "?"
        text = (t.error.last_error or "").splitlines()[0:1]
        return f"retry {t.retries} at {until}: {text[0][:80] if text else ''}"
    return ""


def table(snapshot: Snapshot) -> str:
    """The terminal view: one line per topic, then the ledger and the database."""
    header = ("TOPIC", "STATE", "BACKLOG", "OLDEST", "MAX-WAIT", "PARKED", "MSG/MIN 5M",
              "60M", "STAGED", "DETAIL")
    rows: list[Sequence[str]] = [header]
    for t in snapshot.topics:
        rows.append((t.topic, t.state, _backlog(t), _age(t.oldest_age_s), _age(t.max_wait_s),
                     str(t.parked), f"{t.ledger.per_min_5m:.1f}", f"{t.ledger.per_min_60m:.1f}",
                     str(t.ledger.staged_records), _detail(t)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1]
             for r in rows]
    lines += ["", *_summary(snapshot)]
    return "\n".join(line.rstrip() for line in lines)


def _summary(s: Snapshot) -> list[str]:
    led = s.ledger
    if led.delta_error:
        delta = f"Delta unreadable: {led.delta_error}"
    elif not led.delta_read:
        delta = "Delta not read"
    else:
        delta = f"Delta version {led.delta_version}" if led.delta_exists else "no Delta table yet"
    out = [f"ledger: {led.staged_records} staged record(s), {led.staged_messages} message(s), "
           f"oldest {_age(led.oldest_staged_age_s)}; {delta}"]
    h = s.horizon
    if h:
        who = f"pid {h.pid}" if h.pid is not None else h.kind
        out.append(f"horizon: held {_age(h.age_s)} ({h.xid_age} xids) by {h.kind} {who} "
                   f"{h.name or ''} [{h.state}]".replace("  ", " "))
    else:
        out.append("horizon: nothing holds it back")
    q = s.queue_table
    if q:
        last = iso(q.last_autovacuum) if q.last_autovacuum else "never"
        out.append(f"kafka_messages: {q.dead_tuples:,} dead tuples, {q.live_tuples:,} live; "
                   f"last autovacuum {last}")
    out.append(f"as of {iso(s.generated_at)} (database clock)")
    return out

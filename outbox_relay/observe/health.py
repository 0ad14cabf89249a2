"""The operator notebook's figures as data: snapshot and query rows in, plain dicts out.

Pure functions (no database, no matplotlib): each returns what one figure shows, which
the notebook renders (outbox_relay.observe.plots) and writes beside the PNG as JSON. With many
topics a figure keeps the top N and folds the rest into one `other` entry, so it stays
readable at 1,000 topics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from outbox_relay.observe.report import iso
from outbox_relay.observe.status import STATES, Snapshot, TopicStatus
from outbox_relay.observe.throughput import PerMinute

TOP_BARS = 20
TOP_SERIES = 10
TOP_ROWS = 25
TOP_REASONS = 10
OTHER = "other"
# Which rows of the states table come first: what needs a look.
STATE_ORDER = {"backoff": 0, "locked": 1, "ready": 2}


def _head(snapshot: Snapshot, name: str, title: str) -> dict[str, Any]:
    return {"figure": name, "title": title, "generated_at": iso(snapshot.generated_at)}


def backlog(snapshot: Snapshot, top: int = TOP_BARS) -> dict[str, Any]:
    """Waiting messages per topic, largest first; an estimate is marked `exact: false`."""
    ranked = sorted((t for t in snapshot.topics if t.backlog > 0),
                    key=lambda t: (-t.backlog, t.topic))
    shown, rest = ranked[:top], ranked[top:]
    return {
        **_head(snapshot, "backlog", "Backlog per topic"),
        "topics": [{"topic": t.topic, "backlog": t.backlog, "exact": t.backlog_exact}
                   for t in shown],
        "other": ({"topics": len(rest), "backlog": sum(t.backlog for t in rest),
                   "exact": all(t.backlog_exact for t in rest)} if rest else None),
        "total": sum(t.backlog for t in ranked),
        "topics_with_backlog": len(ranked),
        "topics_known": len(snapshot.topics),
    }


def oldest_age(snapshot: Snapshot, max_age_s: float | None,
               top: int = TOP_BARS) -> dict[str, Any]:
    """The oldest waiting message's age per topic, oldest first, against the threshold."""
    waiting = [t for t in snapshot.topics if t.oldest_age_s is not None]
    ranked = sorted(waiting, key=lambda t: (-(t.oldest_age_s or 0.0), t.topic))
    shown, rest = ranked[:top], ranked[top:]

    def over(age: float | None) -> bool:
        return max_age_s is not None and age is not None and age > max_age_s

    return {
        **_head(snapshot, "oldest_age", "Age of the oldest waiting message"),
        "threshold_s": max_age_s,
        "topics": [{"topic": t.topic, "oldest_age_s": t.oldest_age_s,
                    "max_wait_s": t.max_wait_s, "oldest_id": t.oldest_id,
                    "over": over(t.oldest_age_s)} for t in shown],
        "other": ({"topics": len(rest), "oldest_age_s": max(t.oldest_age_s or 0.0 for t in rest),
                   "over": sum(over(t.oldest_age_s) for t in rest)} if rest else None),
        "over_threshold": sum(over(t.oldest_age_s) for t in waiting),
    }


def _state_row(t: TopicStatus) -> dict[str, Any]:
    return {
        "topic": t.topic, "state": t.state, "retries": t.retries, "backlog": t.backlog,
        "parked": t.parked,
        "locked_by": t.lock.by if t.lock else None,
        "lock_alive": t.lock.alive if t.lock else None,
        "retry_at": iso(t.error.retry_at) if t.error and t.error.retry_at else None,
        "last_error": t.error.last_error if t.error else None,
    }


def states(snapshot: Snapshot, top: int = TOP_ROWS) -> dict[str, Any]:
    """Each topic's state and last error; backoff, then locked, then the rest."""
    ranked = sorted(snapshot.topics, key=lambda t: (STATE_ORDER.get(t.state, 3),
                                                    -t.retries, -t.backlog, t.topic))
    return {
        **_head(snapshot, "states", "Topic states and last errors"),
        "counts": {s: sum(t.state == s for t in snapshot.topics) for s in STATES},
        "rows": [_state_row(t) for t in ranked[:top]],
        "more": max(0, len(ranked) - top),
    }


def _minute_iso(minute: int) -> str:
    return iso(datetime.fromtimestamp(minute * 60, UTC))


def _points(per_minute: Mapping[int, int]) -> dict[str, int]:
    return {_minute_iso(m): n for m, n in sorted(per_minute.items()) if n}


def throughput(series: PerMinute, top: int = TOP_SERIES) -> dict[str, Any]:
    """Messages published per minute per topic: the `top` busiest, the rest summed."""
    totals = {t: sum(m.values()) for t, m in series.counts.items()}
    ranked = sorted((t for t, n in totals.items() if n), key=lambda t: (-totals[t], t))
    shown, rest = ranked[:top], ranked[top:]
    other: dict[int, int] = {}
    for t in rest:
        for minute, n in series.counts[t].items():
            other[minute] = other.get(minute, 0) + n
    hours = series.minutes / 60
    return {
        "figure": "throughput",
        "title": f"Messages published per minute, last {hours:g} h (ledger)",
        "generated_at": iso(series.generated_at),
        "first_minute": _minute_iso(series.first_minute),
        "last_minute": _minute_iso(series.last_minute),
        "minutes": series.minutes,
        "series": [{"topic": t, "total": totals[t], "per_minute": _points(series.counts[t])}
                   for t in shown],
        "other": ({"topics": len(rest), "total": sum(totals[t] for t in rest),
                   "per_minute": _points(other)} if rest else None),
        "totals": {t: totals[t] for t in ranked},
        "delta_read": series.delta_read,
        "delta_error": series.delta_error,
    }


def parked(rows: Sequence[Mapping[str, Any]], generated_at: datetime,
           top: int = TOP_REASONS) -> dict[str, Any]:
    """Parked messages by normalized reason (queries.PARKED_BY_REASON's rows)."""
    ranked = sorted(rows, key=lambda r: (-int(r["messages"]), str(r["reason"])))
    shown, rest = ranked[:top], ranked[top:]
    return {
        "figure": "parked",
        "title": "Parked messages by reason",
        "generated_at": iso(generated_at),
        "reasons": [{"reason": r["reason"], "messages": int(r["messages"]),
                     "topics": int(r["topics"]), "example": r["example"],
                     "last_parked_at": iso(r["last_parked_at"]) if r["last_parked_at"] else None}
                    for r in shown],
        "other": ({"reasons": len(rest), "messages": sum(int(r["messages"]) for r in rest)}
                  if rest else None),
        "total": sum(int(r["messages"]) for r in ranked),
    }


def _plain(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: iso(v if v.tzinfo else v.replace(tzinfo=UTC)) if isinstance(v, datetime) else v
            for k, v in row.items()}


def lookup(found: Mapping[str, Any]) -> dict[str, Any]:
    """One message's places (outbox_relay.observe.message_lookup) and a line that sums them up."""
    places = {k: [_plain(r) for r in found[k]]
              for k in ("waiting", "parked", "staging", "delta")}
    return {"figure": "lookup", "message_id": found["message_id"], **places,
            "delta_error": found.get("delta_error"),
            "summary": lookup_summary(found["message_id"], places)}


def lookup_summary(message_id: int, places: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    lines = []
    for r in places["waiting"]:
        lines.append(f"waiting in topic {r['topic']!r} since {r['created_at']}")
    for r in places["parked"]:
        lines.append(f"parked from topic {r['topic']!r} at {r['parked_at']}: {r['reason']}")
    for where in ("staging", "delta"):
        for r in places[where]:
            lines.append(f"{r['outcome']} to topic {r['topic']!r} at {r['relayed_at']} "
                         f"by {r['actor'] or r['source']}, {r['partition']} (ledger, {where})")
    if not lines:
        return f"message {message_id}: not found (not written, or relayed and expired)"
    return f"message {message_id}: " + "; ".join(lines)

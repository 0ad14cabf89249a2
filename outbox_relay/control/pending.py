"""Which topics have rows waiting, and whether this relay may work on them now."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from outbox_relay.control.db import Database
from outbox_relay.control.locks import IN_BACKOFF, RETRY_AT, live_lock

# The topics with rows in the outbox, as the recursive CTE `waiting(topic)` (its last row
# is NULL): a loose index scan over (topic, id), one index probe per topic instead of a
# scan of the whole queue. Every probe runs backwards, from a topic's newest rows: a
# drain deletes the lowest ids first, and their index entries stay at the front of each
# topic's range until VACUUM removes them, which it cannot while an older transaction
# holds the horizon. A forward probe stepped over all of them, checking each in the heap:
# 6.4 s for 10 topics with 900,000 rows deleted and the horizon held, where the backward
# one took 0.6 ms, which is what a drain's polls and rounds paid every time (bench/, W1H).
WAITING_TOPICS = """
waiting(topic) AS (
    (SELECT topic FROM kafka_messages ORDER BY topic DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT m.topic FROM kafka_messages m WHERE m.topic < w.topic
            ORDER BY m.topic DESC LIMIT 1)
    FROM waiting w WHERE w.topic IS NOT NULL
)"""

# `bound` limits below_bound to rows with id <= bound.
PENDING_TOPICS = f"""
WITH RECURSIVE {WAITING_TOPICS}
SELECT w.topic,
       CASE
         WHEN {live_lock("i.locked_by")} THEN 'locked'
         WHEN {IN_BACKOFF} THEN 'backoff'
         ELSE 'ready'
       END AS state,
       i.locked_by, i.last_error, i.retries,
       greatest(0, extract(epoch FROM {RETRY_AT} - now() AT TIME ZONE 'UTC'))::float
           AS retry_in_s,
       -- A scalar subquery: EXISTS would drop its ORDER BY, and with it the direction.
       (SELECT m.id FROM kafka_messages m WHERE m.topic = w.topic AND m.id <= %(bound)s
        ORDER BY m.id DESC LIMIT 1) IS NOT NULL AS below_bound
FROM waiting w
LEFT JOIN kafka_topic_info i ON i.topic = w.topic
WHERE w.topic IS NOT NULL
ORDER BY w.topic
"""

MAX_ID = "SELECT coalesce(max(id), 0) AS max_id FROM kafka_messages"

# What an available-now drain has to move: once, at its start (its progress line).
WAITING_UP_TO = """
SELECT topic, count(*) AS n FROM kafka_messages WHERE id <= %(bound)s GROUP BY topic
"""

# Every running relay polls the outbox through one connection of this name (its
# streaming source, outbox_relay.stream.source).
SOURCE_APPLICATION = "outbox-relay-source"
RELAYS_POLLING = """
SELECT count(*) AS n FROM pg_stat_activity
WHERE datname = current_database() AND application_name = %s
"""


@dataclass(frozen=True)
class TopicState:
    topic: str
    state: str  # ready | backoff | locked
    locked_by: str | None
    last_error: str | None
    retries: int
    retry_in_s: float
    below_bound: bool


class TopicFilter:
    """Include and exclude regexes; a topic must fully match an include and no exclude."""

    def __init__(self, include: Sequence[str], exclude: Sequence[str]) -> None:
        self._include = [re.compile(p) for p in include]
        self._exclude = [re.compile(p) for p in exclude]

    def __call__(self, topic: str) -> bool:
        return any(p.fullmatch(topic) for p in self._include) and not any(
            p.fullmatch(topic) for p in self._exclude
        )


# One loose scan of an outbox (pending_topics) at a time in a process. When a drain
# ends, the index entries of its last round's rows are dead but not yet marked so, and a
# scan checks each in the heap (and marks it) once: the two lanes' scans at once each
# paid that whole walk, 4.8 s each after a 1M-row drain, where the second one, run
# after the first, finds the entries marked. One lock per outbox: a relay of several
# databases must not make one database's rounds wait for another's scan.
_SCANS: dict[str, threading.Lock] = {}
_SCANS_GUARD = threading.Lock()


def scan_lock(url: str) -> threading.Lock:
    """The lock a process's loose scans of the outbox at `url` take in turn."""
    with _SCANS_GUARD:
        return _SCANS.setdefault(url, threading.Lock())


def pending_topics(
    db: Database, lock_timeout_s: float, topic_filter: TopicFilter, bound: int | None = None
) -> list[TopicState]:
    return topic_states(db.read(PENDING_TOPICS, pending_params(lock_timeout_s, bound)),
                        topic_filter)


def pending_params(lock_timeout_s: float, bound: int | None = None) -> dict[str, Any]:
    # 0 is a bound (an empty outbox at a drain's start: every later row lies above it).
    return {"lock_timeout_s": lock_timeout_s, "bound": 2**63 - 1 if bound is None else bound}


def topic_states(rows: Iterable[Mapping[str, Any]], topic_filter: TopicFilter
                 ) -> list[TopicState]:
    """PENDING_TOPICS's rows of the topics `topic_filter` lets through."""
    return [
        TopicState(
            topic=r["topic"],
            state=r["state"],
            locked_by=r["locked_by"],
            last_error=r["last_error"],
            retries=r["retries"] or 0,
            retry_in_s=float(r["retry_in_s"] or 0.0),
            below_bound=bool(r["below_bound"]),
        )
        for r in rows
        if topic_filter(r["topic"])
    ]


def ready_topics(states: Iterable[TopicState], bound: int | None = None) -> list[str]:
    """The topics a round may lock now (with rows up to `bound` when given)."""
    return [s.topic for s in states if s.state == "ready" and (bound is None or s.below_bound)]


def max_id(db: Database) -> int:
    """The outbox's highest id: an available-now run's bound. 0 when it is empty, which
    still bounds the run (ids start at 1), unlike None."""
    row = db.one(MAX_ID)
    return int(row["max_id"]) if row else 0


def relays_polling(db: Database) -> int:
    """How many relays poll this outbox now, this one included once its source runs."""
    row = db.one(RELAYS_POLLING, (SOURCE_APPLICATION,))
    return int(row["n"]) if row else 0


def waiting_up_to(db: Database, bound: int, topic_filter: TopicFilter) -> int:
    """Rows with id <= bound in the topics this relay serves."""
    rows = db.all(WAITING_UP_TO, {"bound": bound})
    return sum(r["n"] for r in rows if topic_filter(r["topic"]))

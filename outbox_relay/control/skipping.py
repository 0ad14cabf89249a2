"""`outbox-relay skip`: an operator marks messages handled without sending them.

Skipped rows leave kafka_messages and are staged in the ledger as `skipped`, with the
operator's name, in one transaction. It must never race a relay: a relay's claim takes
ids without touching the topic's row, and its read sends whatever the rows hold then,
so a skip that merely found no session could delete a row a relay is about to send and
the ledger would say `skipped` for a message that is in Kafka. So the skip row-locks the
topics first (FOR UPDATE, the same row every lock take, renewal, release and finish
writes) and then refuses if any topic's lock is alive or any id is in a live session.
Nobody can take a topic lock, and so claim, until the skip commits.
"""

from __future__ import annotations

import getpass
import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from outbox_relay.control.claims import live_session
from outbox_relay.control.db import Database
from outbox_relay.control.locks import ENSURE_TOPICS, live_lock
from outbox_relay.rules.outcomes import Outcome

FIND = """
SELECT m.id, m.topic FROM kafka_messages m WHERE m.id = ANY(%(ids)s::bigint[]) ORDER BY m.id
"""

PARKED_AMONG = """
SELECT id FROM relay_parked_messages WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id
"""

# Sorted, like locks.HOLD_OWNED, so two lockers of several topics take them in one order.
LOCK_ROWS = """
SELECT topic FROM kafka_topic_info
WHERE topic = ANY(%(topics)s::varchar[])
ORDER BY topic
FOR UPDATE
"""

# Under the row locks: what would race a relay, a live lock (one a relay would not take
# over: neither expired nor its holder gone) or a live session (an id it sends, or one it
# withholds: outbox_relay.control.withheld).
BUSY = f"""
SELECT i.topic, i.locked_by, i.locked_at, NULL::bigint AS id
FROM kafka_topic_info i
WHERE i.topic = ANY(%(topics)s::varchar[]) AND {live_lock("i.locked_by")}
UNION ALL
SELECT s.topic, s.lock_token, s.claimed_at::timestamp, u.id
FROM relay_sessions s
CROSS JOIN LATERAL unnest(s.ids || s.compacted_ids) AS u(id)
WHERE s.topic = ANY(%(topics)s::varchar[]) AND u.id = ANY(%(ids)s::bigint[])
  AND {live_session("s")}
ORDER BY 1, 4 NULLS FIRST
"""

SKIP = """
WITH gone AS (
    -- Only topics locked above: an id that committed late, after FIND, may be elsewhere.
    DELETE FROM kafka_messages
    WHERE id = ANY(%(ids)s::bigint[]) AND topic = ANY(%(topics)s::varchar[])
    RETURNING id, topic
),
staged AS (
    INSERT INTO relay_ledger_staging (session_id, topic, outcome, ids, source, actor)
    SELECT gen_random_uuid(), topic, %(skipped)s, array_agg(id ORDER BY id), %(source)s,
           %(actor)s
    FROM gone GROUP BY topic
)
SELECT id, topic FROM gone ORDER BY id
"""


@dataclass(frozen=True)
class Busy:
    """Why a topic can't be skipped in now: its lock is alive, or `id` is in a live session."""

    topic: str
    holder: str
    since: Any
    id: int | None


@dataclass(frozen=True)
class SkipResult:
    skipped: dict[int, str]  # id -> topic
    missing: list[int]  # not in the outbox
    busy: list[Busy]  # non-empty: nothing was skipped


def actor(env: Mapping[str, str] | None = None, user: str | None = None,
          host: str | None = None) -> str:
    """Who acts, as `user@host`: the login behind sudo (`alice@host (as root)`), since the
    person is what an operator looks for; a uid without a name is `uid1000@host`."""
    env = os.environ if env is None else env
    user = user if user is not None else _os_user()
    host = host if host is not None else socket.gethostname()
    by = env.get("SUDO_USER")
    if by and by != user:
        return f"{by}@{host} (as {user})"
    return f"{user}@{host}"


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no passwd entry, e.g. an arbitrary uid in a container
        return f"uid{os.getuid()}"


def find(db: Database, ids: Sequence[int]) -> dict[int, str]:
    """Which of `ids` wait in the outbox, with their topics."""
    return {r["id"]: r["topic"] for r in db.all(FIND, {"ids": list(ids)})}


def parked_among(db: Database, ids: Sequence[int]) -> list[int]:
    return [r["id"] for r in db.all(PARKED_AMONG, {"ids": list(ids)})] if ids else []


def skip(db: Database, ids: Sequence[int], *, source: str, actor: str,
         lock_timeout_s: float, wait_s: float = 0.0) -> SkipResult:
    """Skip the ids that wait in the outbox, all or none of them; while a relay is busy
    with one of their topics, try again until `wait_s` has passed."""
    deadline = time.monotonic() + wait_s
    while True:
        result = _skip_once(db, ids, source, actor, lock_timeout_s)
        if not result.busy or time.monotonic() >= deadline:
            return result
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def _skip_once(db: Database, ids: Sequence[int], source: str, actor: str,
               lock_timeout_s: float) -> SkipResult:
    wanted = sorted(set(ids))
    with db.transaction() as cur:
        cur.execute(FIND, {"ids": wanted})
        topics = sorted({r["topic"] for r in cur.fetchall()})
        # A topic no relay has seen gets its row now: a relay takes the lock through it.
        cur.execute(ENSURE_TOPICS, (topics,))
        cur.execute(LOCK_ROWS, {"topics": topics})
        params = {"ids": wanted, "topics": topics, "lock_timeout_s": lock_timeout_s}
        cur.execute(BUSY, params)
        busy = [Busy(r["topic"], r["locked_by"], r["locked_at"], r["id"])
                for r in cur.fetchall()]
        if busy:
            cur.connection.rollback()
            return SkipResult({}, [], busy)
        # A fresh snapshot, taken under the row locks: rows a relay deleted meanwhile are gone.
        cur.execute(SKIP, {**params, "source": source, "actor": actor,
                           "skipped": Outcome.SKIPPED})
        skipped = {r["id"]: r["topic"] for r in cur.fetchall()}
    return SkipResult(skipped, [i for i in wanted if i not in skipped], [])

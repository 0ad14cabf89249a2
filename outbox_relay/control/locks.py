"""Per-topic locks in kafka_topic_info: take, renew, release, or register an error.

Every time comes from the database's clock (``now()``), never the relay host's. The
token in ``locked_by`` is unique to a process, so relays sharing a name still fence
each other. Deimos stores ``timestamp without time zone`` in UTC, and so do we.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from dataclasses import dataclass

from outbox_relay.control.db import Database


def held_by(token: str) -> str:
    """The one definition of "holds the topic's lock": the token, renewed within the lock
    timeout by the database's clock.

    Every fenced statement embeds it, with the topic row aliased ``i`` and the timeout
    passed as ``%(lock_timeout_s)s``; ``token`` is SQL text chosen by the code (a parameter
    placeholder or a column), never a value. The fencing needs nothing more: a lock taken
    over has another token. What LOCK_TOPICS may take over is the negation of `live_lock`.
    """
    return (
        f"(i.locked_by = {token} AND i.locked_at >= now() AT TIME ZONE 'UTC'"
        " - make_interval(secs => %(lock_timeout_s)s))"
    )


HELD = held_by("%(token)s")


def holder_gone(token: str) -> str:
    """The one spelling of "the process behind this token is certainly gone": its
    registered liveness key is held by no backend any more (SQL function
    ``relay_gone_lock_tokens``, outbox_relay/schemas/0018_lock_holders.sql). ``token`` is SQL text
    chosen by the code, as in `held_by`. The set is read once per statement."""
    return f"({token} IN (SELECT relay_gone_lock_tokens()))"


def live_lock(token: str) -> str:
    """A lock nobody may take over: held (`held_by`) by a holder that is not certainly
    gone. A token that never registered (a Deimos producer, an older relay) is never
    gone, so its lock lives until the timeout, as before."""
    return f"({held_by(token)} AND NOT {holder_gone(token)})"

# When a topic in error may be tried again (topic row aliased ``i``): REGISTER_ERROR's
# next_retry_at, or, for a row an older relay or Deimos marked without one, Deimos's flat
# 60 s after locked_at. NULL when the row has neither.
RETRY_AT = "coalesce(i.next_retry_at, i.locked_at + interval '60 seconds')"

# The one definition of "in backoff": in error, and its retry time not reached yet.
IN_BACKOFF = f"(i.error AND coalesce({RETRY_AT}, '-infinity') > now() AT TIME ZONE 'UTC')"

# Only the topics this snapshot lacks reach the insert: a conflict check on a row another
# transaction is updating would wait for it (see LOCK_TOPICS).
ENSURE_TOPICS = """
INSERT INTO kafka_topic_info (topic)
SELECT t FROM unnest(%s::varchar[]) AS t
WHERE NOT EXISTS (SELECT 1 FROM kafka_topic_info i WHERE i.topic = t)
ON CONFLICT (topic) DO NOTHING
"""

# A free topic, a topic whose backoff is over, a lock nobody renewed in time, or one whose
# holder is certainly gone (issue 52: a restarted relay takes a killed one's locks at once).
# A row locked by another transaction is skipped, not waited for: a relay paused inside its
# delete's transaction holds its topics' rows (HOLD_OWNED) until the server ends that
# transaction, and waiting would stall this relay's every other topic as long.
LOCK_TOPICS = f"""
UPDATE kafka_topic_info t
SET locked_by = %(token)s, locked_at = now() AT TIME ZONE 'UTC'
FROM (
    SELECT i.topic FROM kafka_topic_info i
    WHERE i.topic = ANY(%(topics)s::varchar[])
      AND (
            (i.locked_by IS NULL AND NOT {IN_BACKOFF})
         OR (i.locked_by IS NOT NULL AND NOT coalesce({live_lock("i.locked_by")}, false))
      )
    FOR UPDATE OF i SKIP LOCKED
) free
WHERE t.topic = free.topic
RETURNING t.topic
"""

# A lock that lapsed is never renewed, even if nobody took it yet: the batch body may
# already have been refused for it, and it stops working on that topic.
HEARTBEAT = f"""
UPDATE kafka_topic_info i
SET locked_at = now() AT TIME ZONE 'UTC'
WHERE topic = ANY(%(topics)s::varchar[]) AND {HELD}
RETURNING topic
"""

# Row locks on the topics this process still holds. Held until commit, so nobody can
# take the topic over while the session's delete runs.
HOLD_OWNED = f"""
SELECT topic FROM kafka_topic_info i
WHERE topic = ANY(%(topics)s::varchar[]) AND {HELD}
ORDER BY topic
FOR UPDATE
"""

RELEASE = """
UPDATE kafka_topic_info
SET locked_by = NULL, locked_at = NULL, error = false, retries = 0,
    last_error = NULL, next_retry_at = NULL,
    last_processed_at = now() AT TIME ZONE 'UTC'
WHERE topic = ANY(%s::varchar[]) AND locked_by = %s
"""

# Unlike the seed, locked_at stays set (a NULL never expires), and the wait grows
# exponentially with retries up to a cap. The exponent is capped so power() can't overflow.
REGISTER_ERROR = """
UPDATE kafka_topic_info
SET error = true, retries = retries + 1, locked_by = NULL,
    locked_at = now() AT TIME ZONE 'UTC',
    last_error = %(reason)s,
    next_retry_at = now() AT TIME ZONE 'UTC'
        + make_interval(secs => least(%(max)s, %(base)s * power(2, least(retries, 30))))
WHERE topic = %(topic)s AND locked_by = %(token)s
RETURNING retries, next_retry_at
"""

FORCE_UNLOCK = """
UPDATE kafka_topic_info SET locked_by = NULL, locked_at = NULL
WHERE topic = %s RETURNING topic
"""

CLEAR_ERROR = """
UPDATE kafka_topic_info
SET error = false, retries = 0, last_error = NULL, next_retry_at = NULL
WHERE topic = %s RETURNING topic
"""


@dataclass(frozen=True)
class Backoff:
    base_s: float
    max_s: float


class TopicLocks:
    """The lock operations of one relay process (one fencing token)."""

    def __init__(self, db: Database, token: str, lock_timeout_s: float, backoff: Backoff) -> None:
        self.db = db
        self.token = token
        self.lock_timeout_s = lock_timeout_s
        self.backoff = backoff
        # Held by a heartbeat's renewal (outbox_relay.stream.heartbeat): one at a time on `db`.
        self.beating = threading.Lock()

    def acquire(self, topics: Collection[str]) -> list[str]:
        if not topics:
            return []
        with self.db.transaction() as cur:
            cur.execute(ENSURE_TOPICS, (sorted(topics),))
            cur.execute(
                LOCK_TOPICS,
                self.fence_params(topics=sorted(topics)),
            )
            return sorted(row["topic"] for row in cur.fetchall())

    def heartbeat(self, topics: Collection[str]) -> set[str]:
        """Renew the locks; returns the topics this process still holds."""
        rows = self.db.all(HEARTBEAT, self.fence_params(topics=sorted(topics)))
        return {row["topic"] for row in rows}

    def fence_params(self, **extra: object) -> dict[str, object]:
        """The parameters of `HELD` for this process, with a statement's own."""
        return {"token": self.token, "lock_timeout_s": self.lock_timeout_s, **extra}

    def release(self, topics: Collection[str]) -> None:
        if topics:
            self.db.execute(RELEASE, (sorted(topics), self.token))

    def register_error(self, topic: str, reason: str) -> None:
        self.db.execute(REGISTER_ERROR, self.error_params(topic, reason))

    def error_params(self, topic: str, reason: str) -> dict[str, object]:
        return {
            "topic": topic,
            "token": self.token,
            "reason": reason[:4000],
            "base": self.backoff.base_s,
            "max": self.backoff.max_s,
        }

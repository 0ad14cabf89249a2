"""Per-topic locks in kafka_topic_info: take, renew, release, or register an error.

Every time comes from the database's clock (``now()``), never the relay host's. The
token in ``locked_by`` is unique to a process, so relays sharing a name still fence
each other. Deimos stores ``timestamp without time zone`` in UTC, and so do we.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from relay.control.db import Database

ENSURE_TOPICS = """
INSERT INTO kafka_topic_info (topic)
SELECT t FROM unnest(%s::varchar[]) AS t
ON CONFLICT (topic) DO NOTHING
"""

# A free topic, a topic whose backoff is over, or a lock nobody renewed in time.
LOCK_TOPICS = """
UPDATE kafka_topic_info
SET locked_by = %(token)s, locked_at = now() AT TIME ZONE 'UTC'
WHERE topic = ANY(%(topics)s::varchar[])
  AND (
        (locked_by IS NULL
         AND (NOT error
              OR coalesce(next_retry_at, locked_at + interval '60 seconds', '-infinity')
                 <= now() AT TIME ZONE 'UTC'))
     OR (locked_by IS NOT NULL
         AND coalesce(locked_at, '-infinity')
             < now() AT TIME ZONE 'UTC' - make_interval(secs => %(timeout)s))
  )
RETURNING topic
"""

HEARTBEAT = """
UPDATE kafka_topic_info
SET locked_at = now() AT TIME ZONE 'UTC'
WHERE topic = ANY(%s::varchar[]) AND locked_by = %s
RETURNING topic
"""

# Row locks on the topics this process still owns. Held until commit, so nobody can
# take the topic over while the session's delete runs.
HOLD_OWNED = """
SELECT topic FROM kafka_topic_info
WHERE topic = ANY(%s::varchar[]) AND locked_by = %s
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

    def acquire(self, topics: Collection[str]) -> list[str]:
        if not topics:
            return []
        with self.db.transaction() as cur:
            cur.execute(ENSURE_TOPICS, (sorted(topics),))
            cur.execute(
                LOCK_TOPICS,
                {"token": self.token, "topics": sorted(topics), "timeout": self.lock_timeout_s},
            )
            return sorted(row["topic"] for row in cur.fetchall())

    def heartbeat(self, topics: Collection[str]) -> set[str]:
        """Renew the locks; returns the topics this process still holds."""
        rows = self.db.all(HEARTBEAT, (sorted(topics), self.token))
        return {row["topic"] for row in rows}

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

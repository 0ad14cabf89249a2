"""Claims: take the lowest remaining ids of each locked topic as a session (finished by
outbox_relay.control.finish).

A claim records ids in relay_sessions and leaves the payload rows untouched. It also
checks what can fail for certain before anything is sent (relay_message_problem: the
row's size against the topic's limit, the shape of its user headers, a parked message
of the same key). The first bad row of a topic cuts that topic's claim, so order is
kept and the row is reported by id.

On a topic the relay compacts, the claim withholds the rows it supersedes: they stay in
the outbox, their ids in the session's `compacted_ids`, and the session's end decides
whether they leave as `compacted` (outbox_relay.control.withheld). Before it claims, the claim
settles what sessions that could not end withhold on its topics, in its own transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from outbox_relay.control.db import Database
from outbox_relay.control.locks import HELD, held_by, holder_gone
from outbox_relay.control.withheld import FREE_WITHHELD, compact_withheld
from outbox_relay.rules.cloudevent_topics import PLAIN, TopicFlags, sql_arrays
from outbox_relay.rules.partitioners import Partitioner


def live_session(s: str) -> str:
    """The one definition of a session that may still be sending (SQL, the session row
    aliased `s`, the timeout passed as ``%(lock_timeout_s)s``): its process is not
    certainly gone, and its token holds the topic's lock or it is younger than the lock
    timeout. Only other sessions are stale, and their ids are in no batch being sent;
    a gone holder's are stale at once, as its lock is takeable at once (issue 52)."""
    return (
        f"(NOT {holder_gone(s + '.lock_token')}"
        f" AND ({s}.claimed_at >= now() - make_interval(secs => %(lock_timeout_s)s)"
        f" OR EXISTS (SELECT 1 FROM kafka_topic_info i"
        f" WHERE i.topic = {s}.topic AND {held_by(s + '.lock_token')})))"
    )


# Sessions of a relay that died or lost its lock. Another token's session goes only once
# it is stale, so a relay whose own lock lapsed cannot remove the live owner's session;
# and only once it withholds nothing (withheld.COMPACT_WITHHELD, fenced, settles that
# first), or its rows would be sent as if nothing had been sent after them.
CLEAR_STALE_SESSIONS = f"""
DELETE FROM relay_sessions s
WHERE s.topic = ANY(%(topics)s::varchar[]) AND s.lock_token <> %(token)s
  AND cardinality(s.compacted_ids) = 0 AND NOT {live_session("s")}
"""

CLAIM = """
WITH batch AS (SELECT nextval('relay_batch_seq') AS batch_id),
spec AS (
    SELECT s.*,
           EXISTS (SELECT 1 FROM relay_parked_messages p WHERE p.topic = s.topic) AS any_parked
    FROM unnest(%(topics)s::varchar[], %(max_bytes)s::bigint[],
                %(key_required)s::bool[], %(compact)s::bool[],
                %(cloudevents)s::bool[], %(type_required)s::bool[])
        AS s(topic, max_bytes, key_required, compact, cloudevents, type_required)
),
candidate AS (
    -- relay_message_problem only where it can find one (relay_message_may_fail, schema
    -- 0015): its probe of the parked table per row was most of a large claim's time.
    SELECT s.topic, s.compact, c.id, c.key, c.partition_key, c.size,
           CASE WHEN relay_message_may_fail(c.size, s.max_bytes, c.headers, c.key,
                                            s.key_required, s.any_parked, s.type_required)
                THEN relay_message_problem(c.id, s.topic, c.message, c.key, c.partition_key,
                                           c.headers, s.max_bytes, %(prefix)s, s.key_required,
                                           s.cloudevents, s.type_required)
           END AS problem
    FROM spec s
    JOIN kafka_topic_info i ON i.topic = s.topic AND """ + HELD + """
    CROSS JOIN LATERAL (
        SELECT m.id, m.key, m.message, m.partition_key, m.headers,
               relay_message_size(m.message, m.key, m.headers) AS size
        FROM kafka_messages m
        WHERE m.topic = s.topic
        ORDER BY m.id
        -- A topic retried after an error sends its head alone first: if only the broker
        -- refuses the head, the rest of a full claim would be appended on every retry.
        LIMIT CASE WHEN i.error THEN 1 ELSE %(limit)s END
    ) c
),
first_problem AS (
    SELECT DISTINCT ON (topic) topic, id AS bad_id, problem
    FROM candidate WHERE problem IS NOT NULL
    ORDER BY topic, id
),
healthy AS (
    SELECT c.*, sum(c.size) OVER (PARTITION BY c.topic ORDER BY c.id) AS running_bytes,
           row_number() OVER (PARTITION BY c.topic ORDER BY c.id) AS n
    FROM candidate c LEFT JOIN first_problem f ON f.topic = c.topic
    WHERE f.bad_id IS NULL OR c.id < f.bad_id
),
chosen AS (
    SELECT h.* FROM healthy h WHERE h.running_bytes <= %(batch_bytes)s OR h.n = 1
),
-- Kafka compacts by record key, but only within a partition: a later row supersedes only
-- with the same key AND the same partitioning bytes. Only a compacted topic's keyed rows
-- go through the window: sorting every row by key was a fifth of a large claim's time.
superseded AS (
    SELECT k.id FROM (
        SELECT c.id, max(c.id) OVER (
                   PARTITION BY c.topic, c.key, relay_partitioning_key(c.partition_key, c.key)
               ) AS newest
        FROM chosen c WHERE c.compact AND c.key IS NOT NULL
    ) k
    WHERE k.id < k.newest
),
-- Whether a topic's claim stopped at its row or byte limit: more of it is waiting, and
-- its next rounds go to the drain lane (outbox_relay.stream.lanes). A cut at a bad row is not.
backlog AS (
    SELECT h.topic, count(*) >= %(limit)s OR bool_or(h.running_bytes > %(batch_bytes)s
                                                    AND h.n > 1) AS more
    FROM healthy h GROUP BY h.topic
),
-- A key's newest row in the claim is never superseded, so every session keeps at least
-- one row to send. The superseded rows are withheld (outbox_relay.control.withheld), not
-- deleted: whether they may leave depends on what becomes of the write.
grouped AS (
    SELECT c.topic, array_agg(c.id ORDER BY c.id) FILTER (WHERE x.id IS NULL) AS ids,
           coalesce(array_agg(c.id ORDER BY c.id) FILTER (WHERE x.id IS NOT NULL), '{}')
               AS withheld,
           coalesce(sum(c.size) FILTER (WHERE x.id IS NULL), 0) AS bytes
    FROM chosen c LEFT JOIN superseded x ON x.id = c.id
    GROUP BY c.topic
),
session AS (
    INSERT INTO relay_sessions (session_id, batch_id, topic, lock_token, ids, compacted_ids)
    SELECT gen_random_uuid(), (SELECT batch_id FROM batch), topic, %(token)s, ids, withheld
    FROM grouped
    RETURNING session_id, batch_id, topic, cardinality(ids) AS rows,
              cardinality(compacted_ids) AS withheld
)
SELECT coalesce(s.topic, f.topic) AS topic, s.session_id, s.batch_id, s.rows, s.withheld,
       f.bad_id, f.problem, coalesce(b.more, false) AS more, coalesce(g.bytes, 0) AS bytes
FROM session s FULL JOIN first_problem f ON f.topic = s.topic
LEFT JOIN backlog b ON b.topic = coalesce(s.topic, f.topic)
LEFT JOIN grouped g ON g.topic = s.topic
"""

SESSION_SENT_IDS = """
SELECT ids FROM relay_sessions WHERE session_id = %s AND lock_token = %s
"""

# After isolation only a prefix was acknowledged: the session keeps just that prefix. What
# it withholds stays withheld (FREE_WITHHELD, run first, decides which rows go back).
TRUNCATE_SESSION = """
UPDATE relay_sessions SET ids = %(delivered)s::bigint[]
WHERE session_id = %(session)s AND lock_token = %(token)s
"""

# A session that withholds rows stays for the next lock holder to settle them.
ABANDON_SESSIONS = """
DELETE FROM relay_sessions
WHERE session_id = ANY(%s::uuid[]) AND cardinality(compacted_ids) = 0
"""


@dataclass(frozen=True)
class TopicLimits:
    topic: str
    max_bytes: int
    compact: bool  # the relay's own compaction rule (superseded messages are not sent)
    key_required: bool = False  # the topic is compacted in Kafka: a keyless record is poison
    # How this round's records are partitioned, for the ledger; None: not recorded.
    partitions: int | None = None
    partitioner: Partitioner | None = None
    # CloudEvents (outbox_relay.rules.cloudevent_topics.TopicFlags): checked by the claim.
    flags: TopicFlags = PLAIN


@dataclass(frozen=True)
class Claim:
    """What one claim statement took for one topic."""

    topic: str
    session_id: str | None
    rows: int  # the rows to send
    withheld: int  # the rows it superseded, withheld until the session ends
    bad_id: int | None
    problem: str | None
    partitions: int | None = None  # the topic's partition count for this send
    partitioner: Partitioner | None = None
    more: bool = False  # the claim stopped at its row or byte limit: more is waiting
    bytes: int = 0  # the rows' size as the claim measures it (relay_message_size)


@dataclass(frozen=True)
class ClaimBatch:
    batch_id: int | None
    claims: list[Claim]
    # Per topic, the rows withheld by sessions that could not end, settled as compacted.
    compacted: dict[str, int] = field(default_factory=dict)

    @property
    def sessions(self) -> list[Claim]:
        return [c for c in self.claims if c.session_id is not None]


class Claims:
    def __init__(self, db: Database, token: str, lock_timeout_s: float, header_prefix: str,
                 source_name: str) -> None:
        self.db = db
        self.token = token
        self.lock_timeout_s = lock_timeout_s
        self.header_prefix = header_prefix
        self.source_name = source_name

    def claim(self, limits: Sequence[TopicLimits], limit: int, batch_bytes: int) -> ClaimBatch:
        topics = [t.topic for t in limits]
        params = {
            "topics": topics,
            "max_bytes": [t.max_bytes for t in limits],
            "key_required": [t.key_required for t in limits],
            "compact": [t.compact for t in limits],
            **sql_arrays([t.flags for t in limits]),
            **self._fence(),
            "prefix": self.header_prefix,
            "limit": limit,
            "batch_bytes": batch_bytes,
        }
        with self.db.transaction() as cur:
            # First: a row another session withholds must not be claimed as if unsent.
            compacted = compact_withheld(cur, topics, self._fence(), self.source_name)
            cur.execute(CLEAR_STALE_SESSIONS, {"topics": topics, **self._fence()})
            cur.execute(CLAIM, params)
            rows = cur.fetchall()
        spec = {t.topic: t for t in limits}
        claims = [
            Claim(
                topic=r["topic"],
                session_id=str(r["session_id"]) if r["session_id"] else None,
                rows=r["rows"] or 0,
                withheld=r["withheld"] or 0,
                bad_id=r["bad_id"],
                problem=r["problem"],
                partitions=spec[r["topic"]].partitions,
                partitioner=spec[r["topic"]].partitioner,
                more=bool(r["more"]),
                bytes=int(r["bytes"]),
            )
            for r in rows
        ]
        batch_ids = {r["batch_id"] for r in rows if r["batch_id"] is not None}
        return ClaimBatch(batch_id=batch_ids.pop() if batch_ids else None, claims=claims,
                          compacted=compacted)

    def _fence(self) -> dict[str, object]:
        """The parameters of locks.HELD for this token."""
        return {"token": self.token, "lock_timeout_s": self.lock_timeout_s}

    def sent_ids(self, session_id: str) -> list[int]:
        row = self.db.one(SESSION_SENT_IDS, (session_id, self.token))
        return list(row["ids"]) if row else []

    def isolated(self, session_id: str, delivered: Sequence[int], culprit: int | None) -> int:
        """What isolation found: `delivered`, the acknowledged prefix the session keeps
        (none: it keeps its ids), and `culprit`, the row Kafka refused for good (None:
        no such row). Returns how many withheld rows went back to the outbox's rows."""
        freed = 0
        with self.db.transaction() as cur:
            if culprit is not None:  # first: it reads the session's ids before the cut
                cur.execute(FREE_WITHHELD, {**self._fence(), "session": session_id,
                                            "culprit": culprit})
                row = cur.fetchone()
                freed = int(row["freed"]) if row else 0
            if delivered:
                cur.execute(TRUNCATE_SESSION, {"delivered": sorted(delivered),
                                               "session": session_id, "token": self.token})
        return freed

    def abandon(self, session_ids: Collection[str]) -> None:
        if session_ids:
            self.db.execute(ABANDON_SESSIONS, (list(session_ids),))

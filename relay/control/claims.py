"""Claims: take the lowest remaining ids of each locked topic as a session, then finish it.

A claim records ids in relay_sessions and leaves the payload rows untouched. It also
checks what can fail for certain before anything is sent (relay_message_problem: the
row's size against the topic's limit, the shape of its user headers, a parked message
of the same key). The first bad row of a topic cuts that topic's claim, so order is
kept and the row is reported by id.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from relay.control.db import Database
from relay.control.locks import HELD, HOLD_OWNED, REGISTER_ERROR, RELEASE, TopicLocks, held_by
from relay.partitioners import Partitioner


def live_session(s: str) -> str:
    """The one definition of a session that may still be sending (SQL, the session row
    aliased `s`, the timeout passed as ``%(lock_timeout_s)s``): its token holds the
    topic's lock, or it is younger than the lock timeout. Only other sessions are
    stale, and their ids are in no batch being sent."""
    return (
        f"({s}.claimed_at >= now() - make_interval(secs => %(lock_timeout_s)s)"
        f" OR EXISTS (SELECT 1 FROM kafka_topic_info i"
        f" WHERE i.topic = {s}.topic AND {held_by(s + '.lock_token')}))"
    )


# Sessions of a relay that died or lost its lock. Another token's session goes only once
# it is stale, so a relay whose own lock lapsed cannot remove the live owner's session.
CLEAR_STALE_SESSIONS = f"""
DELETE FROM relay_sessions s
WHERE s.topic = ANY(%(topics)s::varchar[]) AND s.lock_token <> %(token)s
  AND NOT {live_session("s")}
"""

CLAIM = """
WITH batch AS (SELECT nextval('relay_batch_seq') AS batch_id),
spec AS (
    SELECT s.*,
           EXISTS (SELECT 1 FROM relay_parked_messages p WHERE p.topic = s.topic) AS any_parked
    FROM unnest(%(topics)s::varchar[], %(max_bytes)s::bigint[],
                %(key_required)s::bool[], %(compact)s::bool[])
        AS s(topic, max_bytes, key_required, compact)
),
candidate AS (
    -- relay_message_problem only where it can find one (its own conditions): its probe
    -- of the parked table per row was most of a large claim's time (bench/, EXPLAIN).
    SELECT s.topic, s.compact, c.id, c.key, c.partition_key, c.size,
           CASE WHEN c.size > s.max_bytes OR c.headers IS NOT NULL OR s.any_parked
                     OR (s.key_required AND c.key IS NULL)
                THEN relay_message_problem(c.id, s.topic, c.message, c.key, c.partition_key,
                                           c.headers, s.max_bytes, %(prefix)s, s.key_required)
           END AS problem
    FROM spec s
    JOIN kafka_topic_info i ON i.topic = s.topic AND """ + HELD + """
    CROSS JOIN LATERAL (
        SELECT m.id, m.key, m.message, m.partition_key, m.headers,
               coalesce(octet_length(m.message), 0) + coalesce(octet_length(m.key), 0)
               + coalesce(octet_length(m.headers::text), 0) AS size
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
    SELECT h.*,
           -- Kafka compacts by record key, but only within a partition: a later row
           -- supersedes only with the same key AND the same partitioning bytes.
           h.compact AND h.key IS NOT NULL
           AND h.id < max(h.id) OVER (
               PARTITION BY h.topic, h.key, relay_partitioning_key(h.partition_key, h.key)
           ) AS superseded
    FROM healthy h
    WHERE h.running_bytes <= %(batch_bytes)s OR h.n = 1
),
session AS (
    INSERT INTO relay_sessions (session_id, batch_id, topic, lock_token, ids, compacted_ids)
    SELECT gen_random_uuid(), (SELECT batch_id FROM batch), topic, %(token)s,
           array_agg(id ORDER BY id),
           coalesce(array_agg(id ORDER BY id) FILTER (WHERE superseded), '{}')
    FROM chosen GROUP BY topic
    RETURNING session_id, batch_id, topic,
              cardinality(ids) AS rows, cardinality(compacted_ids) AS compacted
)
SELECT coalesce(s.topic, f.topic) AS topic, s.session_id, s.batch_id, s.rows, s.compacted,
       f.bad_id, f.problem
FROM session s FULL JOIN first_problem f ON f.topic = s.topic
"""

# Deletes only rows of sessions whose topic lock is held (see locks.HOLD_OWNED, taken
# in the same transaction), and stages the ledger record of exactly the rows deleted.
# A published record also keeps each row's partitioning bytes (the one definition,
# relay_partitioning_key), with the partition count and partitioner of its send: the
# Delta copy computes the partition from them once the rows are gone. The two unordered
# array_aggs of one group see its rows in the same order, so the arrays stay parallel
# (the staging table checks their lengths).
# It also returns the delivery lag of the published rows as histogram buckets
# (relay.observe.runtime.DeliveryLag): counted here, where the rows pass anyway, a
# drain's million rows cost one aggregate instead of a million Python observations.
# The lag is taken on the database's clock, as created_at is: the end of the write is
# now minus the seconds that passed since, measured on the driver.
FINISH_SESSIONS = """
WITH done AS (
    DELETE FROM relay_sessions s
    USING unnest(%(sessions)s::uuid[], %(partitions)s::integer[], %(partitioners)s::varchar[])
        AS f(session_id, partitions, partitioner)
    WHERE s.session_id = f.session_id AND s.topic = ANY(%(owned)s::varchar[])
      AND s.lock_token = %(token)s
    RETURNING s.session_id, s.topic, s.ids, s.compacted_ids, f.partitions, f.partitioner
),
removed AS (
    DELETE FROM kafka_messages m
    USING done d
    WHERE m.id = ANY(d.ids) AND m.topic = d.topic
    RETURNING m.id, d.session_id, d.topic, m.id = ANY(d.compacted_ids) AS compacted,
              m.created_at, relay_partitioning_key(m.partition_key, m.key) AS partitioning_key,
              d.partitions, d.partitioner
),
staged AS (
    INSERT INTO relay_ledger_staging
        (session_id, topic, outcome, ids, source, partitioning_keys, topic_partitions,
         partitioner)
    -- Unordered: the ledger explodes the arrays, and sorting every deleted id spilled.
    SELECT session_id, topic,
           CASE WHEN compacted THEN 'compacted' ELSE 'published' END,
           array_agg(id), %(source)s,
           -- A compacted row was never sent: it has no partition.
           array_agg(partitioning_key) FILTER (WHERE NOT compacted),
           CASE WHEN NOT compacted THEN partitions END,
           CASE WHEN NOT compacted THEN partitioner END
    FROM removed
    GROUP BY session_id, topic, compacted, partitions, partitioner
    RETURNING topic, outcome, cardinality(ids) AS rows
),
-- The lag is cut into buckets on created_at itself: edges `written - bound`, ascending,
-- so no row's lag is computed alone (that cost twice as much on 200k rows). A row with
-- lag <= bound lies at or after that edge; `bucket` is Prometheus's: the first bound the
-- lag is <= to (cardinality for above them all).
edges AS (
    SELECT w.written, array_agg(w.written - make_interval(secs => b) ORDER BY b DESC) AS at
    FROM (SELECT (statement_timestamp() AT TIME ZONE 'UTC')
                 - make_interval(secs => %(since_write_s)s) AS written) w
    CROSS JOIN unnest(%(lag_bounds)s::float8[]) AS b
    GROUP BY w.written
),
lag AS (
    SELECT cardinality(%(lag_bounds)s::float8[]) - width_bucket(r.created_at, e.at) AS bucket,
           count(*) AS rows,
           extract(epoch FROM sum(greatest(e.written - r.created_at, interval '0')))::float8
               AS seconds
    FROM removed r CROSS JOIN edges e
    WHERE NOT r.compacted
    GROUP BY 1
)
SELECT topic, outcome, rows, NULL::int AS bucket, NULL::float8 AS seconds FROM staged
UNION ALL
SELECT NULL, NULL, rows, bucket, seconds FROM lag
"""

SESSION_SENT_IDS = """
SELECT array(SELECT x FROM unnest(ids) AS x WHERE NOT x = ANY(compacted_ids) ORDER BY x) AS ids
FROM relay_sessions WHERE session_id = %s AND lock_token = %s
"""

# After isolation only a prefix was acknowledged. A compacted row stays in the session,
# deleted as compacted, iff a later row of its key (same record key and partitioning
# bytes, as in CLAIM) is in that prefix; otherwise it leaves the session and waits: its
# successor may not have been delivered. Dropping them all would send a superseded value
# on the next claim, after its successor.
TRUNCATE_SESSION = """
WITH own AS (
    SELECT session_id, compacted_ids FROM relay_sessions
    WHERE session_id = %(session)s AND lock_token = %(token)s
),
kept AS (
    SELECT c.id
    FROM own o
    CROSS JOIN LATERAL unnest(o.compacted_ids) AS c(id)
    JOIN kafka_messages m ON m.id = c.id
    WHERE EXISTS (
        SELECT 1 FROM kafka_messages d
        WHERE d.id = ANY(%(delivered)s::bigint[]) AND d.id > m.id AND d.key = m.key
          AND relay_partitioning_key(d.partition_key, d.key)
              = relay_partitioning_key(m.partition_key, m.key))
)
UPDATE relay_sessions s
SET ids = array(SELECT x FROM unnest(%(delivered)s::bigint[]) AS x
                UNION SELECT id FROM kept ORDER BY 1),
    compacted_ids = array(SELECT id FROM kept ORDER BY id)
FROM own o
WHERE s.session_id = o.session_id
"""

ABANDON_SESSIONS = "DELETE FROM relay_sessions WHERE session_id = ANY(%s::uuid[])"
ABANDON_OWN_SESSIONS = """
DELETE FROM relay_sessions WHERE topic = ANY(%s::varchar[]) AND lock_token = %s
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


@dataclass(frozen=True)
class Claim:
    """What one claim statement took for one topic."""

    topic: str
    session_id: str | None
    rows: int
    compacted: int
    bad_id: int | None
    problem: str | None
    partitions: int | None = None  # the topic's partition count for this send
    partitioner: Partitioner | None = None


@dataclass(frozen=True)
class ClaimBatch:
    batch_id: int | None
    claims: list[Claim]

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
            "token": self.token,
            "lock_timeout_s": self.lock_timeout_s,
            "prefix": self.header_prefix,
            "limit": limit,
            "batch_bytes": batch_bytes,
        }
        with self.db.transaction() as cur:
            cur.execute(CLEAR_STALE_SESSIONS, {"topics": topics, "token": self.token,
                                               "lock_timeout_s": self.lock_timeout_s})
            cur.execute(CLAIM, params)
            rows = cur.fetchall()
        spec = {t.topic: t for t in limits}
        claims = [
            Claim(
                topic=r["topic"],
                session_id=str(r["session_id"]) if r["session_id"] else None,
                rows=r["rows"] or 0,
                compacted=r["compacted"] or 0,
                bad_id=r["bad_id"],
                problem=r["problem"],
                partitions=spec[r["topic"]].partitions,
                partitioner=spec[r["topic"]].partitioner,
            )
            for r in rows
        ]
        batch_ids = {r["batch_id"] for r in rows if r["batch_id"] is not None}
        return ClaimBatch(batch_id=batch_ids.pop() if batch_ids else None, claims=claims)

    def sent_ids(self, session_id: str) -> list[int]:
        row = self.db.one(SESSION_SENT_IDS, (session_id, self.token))
        return list(row["ids"]) if row else []

    def truncate(self, session_id: str, ids: Sequence[int]) -> None:
        self.db.execute(TRUNCATE_SESSION, {
            "delivered": list(ids), "session": session_id, "token": self.token})

    def abandon(self, session_ids: Collection[str]) -> None:
        if session_ids:
            self.db.execute(ABANDON_SESSIONS, (list(session_ids),))


@dataclass(frozen=True)
class Finished:
    owned: set[str]
    lost: set[str]
    published: int
    compacted: int
    # (bucket index, rows, sum of lags in seconds) of the published rows; see FINISH_SESSIONS.
    lag: list[tuple[int, int, float]] = field(default_factory=list)


def finish(
    claims: Claims,
    locks: TopicLocks,
    locked: Collection[str],
    sessions: Sequence[Claim],
    errors: dict[str, str],
    lag_bounds: Sequence[float] = (),
    since_write_s: float = 0.0,
) -> Finished:
    """Delete what Kafka acknowledged, stage the ledger, and release or error each topic.

    `lag_bounds` are the delivery-lag histogram's bucket bounds, ascending, and
    `since_write_s` the seconds since the batch's write ended (see FINISH_SESSIONS).

    `sessions` are the acknowledged ones; every other session of this process on the
    `locked` topics is dropped (its rows stay). One transaction: a crash before its
    commit leaves the rows for a re-send (the only source of duplicates), and a crash
    after it leaves nothing half done.
    """
    topics = sorted(set(locked) | {c.topic for c in sessions} | set(errors))
    with claims.db.transaction() as cur:
        cur.execute(HOLD_OWNED, locks.fence_params(topics=topics))
        owned = {r["topic"] for r in cur.fetchall()}
        cur.execute(
            FINISH_SESSIONS,
            {
                "sessions": [c.session_id for c in sessions],
                "partitions": [c.partitions for c in sessions],
                "partitioners": [c.partitioner for c in sessions],
                "owned": sorted(owned),
                "token": claims.token,
                "source": claims.source_name,
                "lag_bounds": list(lag_bounds) or [0.0],
                "since_write_s": max(0.0, since_write_s),
            },
        )
        result = cur.fetchall()
        staged = [r for r in result if r["bucket"] is None]
        # Also on topics whose lock was lost: nobody else finishes our sessions, and
        # others clear them only once they are older than the lock timeout.
        cur.execute(ABANDON_OWN_SESSIONS, (topics, claims.token))
        cur.execute(RELEASE, (sorted(owned - errors.keys()), claims.token))
        for topic in sorted(owned & errors.keys()):
            cur.execute(REGISTER_ERROR, locks.error_params(topic, errors[topic]))
    return Finished(
        owned=owned,
        lost=set(topics) - owned,
        published=sum(r["rows"] for r in staged if r["outcome"] == "published"),
        compacted=sum(r["rows"] for r in staged if r["outcome"] == "compacted"),
        lag=[(r["bucket"], r["rows"], r["seconds"]) for r in result
             if r["bucket"] is not None] if lag_bounds else [],
    )

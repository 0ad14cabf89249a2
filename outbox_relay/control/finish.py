"""The end of a batch on the control plane: delete what Kafka acknowledged and what the
sessions withheld, stage their ledger records, and release or error each topic, in one
transaction."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from outbox_relay.control.claims import Claim, Claims
from outbox_relay.control.locks import HOLD_OWNED, REGISTER_ERROR, RELEASE, TopicLocks
from outbox_relay.control.withheld import compact_withheld
from outbox_relay.rules.outcomes import Outcome

# Deletes only rows of sessions whose topic lock is held (see locks.HOLD_OWNED, taken
# in the same transaction), and stages the ledger record of exactly the rows deleted
# (what the sessions withheld went just before: outbox_relay.control.withheld).
# A published record also keeps each row's partitioning bytes (the one definition,
# relay_partitioning_key), with the partition count and partitioner of its send: the
# Delta copy computes the partition from them once the rows are gone. The two unordered
# array_aggs of one group see its rows in the same order, so the arrays stay parallel
# (the staging table checks their lengths).
# It also returns the delivery lag of the published rows as histogram buckets
# (outbox_relay.observe.runtime.DeliveryLag): counted here, where the rows pass anyway, a
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
    RETURNING s.session_id, s.topic, s.ids, f.partitions, f.partitioner
),
removed AS (
    DELETE FROM kafka_messages m
    USING done d
    WHERE m.id = ANY(d.ids) AND m.topic = d.topic
    RETURNING m.id, d.session_id, d.topic,
              m.created_at, relay_partitioning_key(m.partition_key, m.key) AS partitioning_key,
              d.partitions, d.partitioner
),
staged AS (
    INSERT INTO relay_ledger_staging
        (session_id, topic, outcome, ids, source, partitioning_keys, topic_partitions,
         partitioner)
    -- Unordered: the ledger explodes the arrays, and sorting every deleted id spilled.
    SELECT session_id, topic, %(published)s, array_agg(id), %(source)s,
           array_agg(partitioning_key), partitions, partitioner
    FROM removed
    GROUP BY session_id, topic, partitions, partitioner
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
    GROUP BY 1
)
SELECT topic, outcome, rows, NULL::int AS bucket, NULL::float8 AS seconds FROM staged
UNION ALL
SELECT NULL, NULL, rows, bucket, seconds FROM lag
"""

# A session of a topic whose lock was lost keeps what it withholds: its holder may have
# appended the successors, and the next holder of the lock deletes those rows as
# compacted (outbox_relay.control.withheld). On the topics still held they are settled already.
ABANDON_OWN_SESSIONS = """
DELETE FROM relay_sessions
WHERE topic = ANY(%s::varchar[]) AND lock_token = %s AND cardinality(compacted_ids) = 0
"""


@dataclass(frozen=True)
class Finished:
    owned: set[str]
    lost: set[str]
    published: int
    compacted: dict[str, int] = field(default_factory=dict)  # per topic: withheld rows deleted
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
    `locked` topics is dropped (its rows stay). Every session's withheld rows on the
    topics still held leave as compacted, acknowledged or not: what isolation could
    free was freed before (outbox_relay.control.withheld). One transaction: a crash before its
    commit leaves the rows for a re-send (the only source of duplicates), and a crash
    after it leaves nothing half done.
    """
    topics = sorted(set(locked) | {c.topic for c in sessions} | set(errors))
    with claims.db.transaction() as cur:
        cur.execute(HOLD_OWNED, locks.fence_params(topics=topics))
        owned = {r["topic"] for r in cur.fetchall()}
        # Before FINISH_SESSIONS: it deletes the acknowledged sessions' rows, and with
        # them the record of what they withheld.
        compacted = compact_withheld(cur, sorted(owned), locks.fence_params(),
                                     claims.source_name)
        cur.execute(
            FINISH_SESSIONS,
            {
                "sessions": [c.session_id for c in sessions],
                "partitions": [c.partitions for c in sessions],
                "partitioners": [c.partitioner for c in sessions],
                "owned": sorted(owned),
                "token": claims.token,
                "source": claims.source_name,
                "published": Outcome.PUBLISHED,
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
        published=sum(r["rows"] for r in staged),
        compacted=compacted,
        lag=[(r["bucket"], r["rows"], r["seconds"]) for r in result
             if r["bucket"] is not None] if lag_bounds else [],
    )

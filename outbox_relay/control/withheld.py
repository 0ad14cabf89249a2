"""Rows a session withholds on a topic the relay compacts, and when they may leave.

A claim that takes two rows of one key (the same record key and partitioning bytes, the
one definition `relay_partitioning_key`) sends only the later one. The older row stays
in the outbox, untouched, and its id goes to the session's `compacted_ids`: the session
withholds it. Only the newest row of a key is in the session's `ids`, so a withheld
row's successor is the row of `ids` with its record key and partitioning bytes.

A withheld row must never reach Kafka after a later row of its partitioning key may
have (invariant 2), and leaves the outbox only when it can no longer be sent in order:

- A session that ends (outbox_relay.control.finish), acknowledged or not, deletes its withheld
  rows as `compacted`: its writes handed every row of `ids` to Kafka, and a write that
  failed may still have appended any of them (one partition acknowledges while another
  fails; a timeout says nothing).
- Except the rows isolation frees first (`FREE_WITHHELD`): when Kafka refused the
  session's culprit for good, the culprit was never appended. A withheld row whose
  partitioning key has no later row in `ids` but the culprit can still go in order; it
  leaves the session's `compacted_ids` and is claimed again like any other row.
- A session that cannot end, because its topic's lock was lost, keeps its withheld
  rows; whoever holds the topic's lock next deletes them as `compacted`, under that
  session's id, before it claims or parks anything (`COMPACT_WITHHELD`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from outbox_relay.control.locks import HELD
from outbox_relay.rules.outcomes import Outcome


def withheld_ids(topic: str) -> str:
    """SQL: the ids that sessions of `topic` withhold, as an array (empty when none).

    `topic` is SQL text chosen by the code (a column or a parameter placeholder), never
    a value. Parking leaves these rows alone: their sessions, or the next claim, decide.
    """
    return ("ARRAY(SELECT w.id FROM relay_sessions ws"
            " CROSS JOIN LATERAL unnest(ws.compacted_ids) AS w(id)"
            " WHERE ws.topic = " + topic + ")")


# Every row withheld by a session of a topic whose lock this token holds: the ending
# session's own (outbox_relay.control.finish), and those of sessions that could not end (lost
# lock, a crash), which the next holder settles before it claims. Each is staged under
# the session that withheld it, and the session withholds nothing more. The delete's
# RETURNING decides what is staged: a row an operator skipped meanwhile is not.
COMPACT_WITHHELD = """
WITH pending AS (
    SELECT s.session_id, s.topic, s.compacted_ids
    FROM relay_sessions s
    JOIN kafka_topic_info i ON i.topic = s.topic AND """ + HELD + """
    WHERE s.topic = ANY(%(topics)s::varchar[]) AND cardinality(s.compacted_ids) > 0
),
cleared AS (
    UPDATE relay_sessions s SET compacted_ids = '{}'
    FROM pending p
    WHERE s.session_id = p.session_id
),
gone AS (
    DELETE FROM kafka_messages m
    USING pending p
    WHERE m.id = ANY(p.compacted_ids) AND m.topic = p.topic
    RETURNING m.id, p.session_id, p.topic
),
staged AS (
    INSERT INTO relay_ledger_staging (session_id, topic, outcome, ids, source)
    SELECT session_id, topic, %(compacted)s, array_agg(id), %(source)s
    FROM gone
    GROUP BY session_id, topic
    RETURNING topic, cardinality(ids) AS rows
)
SELECT topic, sum(rows)::bigint AS rows FROM staged GROUP BY topic
"""

# After isolation found the session's culprit refused for good: a withheld row goes back
# to the outbox's ordinary rows when no row of its partitioning key in `ids` is later
# than it, the culprit aside (the culprit was never appended; every other row of `ids`
# may have been). One pass over `ids` per session, not one per withheld row. Fenced: a
# session whose lock was lost keeps its rows for the next holder to settle.
FREE_WITHHELD = """
WITH own AS (
    SELECT s.session_id, s.ids, s.compacted_ids
    FROM relay_sessions s
    JOIN kafka_topic_info i ON i.topic = s.topic AND """ + HELD + """
    WHERE s.session_id = %(session)s AND s.lock_token = %(token)s
),
latest AS (
    SELECT relay_partitioning_key(m.partition_key, m.key) AS pkey, max(m.id) AS id
    FROM own o
    JOIN kafka_messages m ON m.id = ANY(o.ids)
    WHERE m.id <> %(culprit)s
    GROUP BY 1
),
freed AS (
    SELECT w.id
    FROM own o
    JOIN kafka_messages w ON w.id = ANY(o.compacted_ids)
    LEFT JOIN latest l ON l.pkey = relay_partitioning_key(w.partition_key, w.key)
    WHERE l.id IS NULL OR l.id < w.id
)
UPDATE relay_sessions s
SET compacted_ids = array(SELECT x FROM unnest(o.compacted_ids) AS x
                          WHERE x NOT IN (SELECT id FROM freed) ORDER BY x)
FROM own o
WHERE s.session_id = o.session_id
RETURNING (SELECT count(*) FROM freed) AS freed
"""


def compact_withheld(cur: Any, topics: Sequence[str], fence: dict[str, object],
                     source: str) -> dict[str, int]:
    """Runs COMPACT_WITHHELD in the caller's transaction; returns the rows per topic.

    `fence` holds the parameters of locks.HELD (TopicLocks.fence_params)."""
    if not topics:
        return {}
    cur.execute(COMPACT_WITHHELD, {**fence, "topics": sorted(topics), "source": source,
                                   "compacted": Outcome.COMPACTED})
    return {r["topic"]: int(r["rows"]) for r in cur.fetchall()}

"""The `park` policy's dead-letter table, and the operator's verbs over it.

Parking moves a row, bytes intact, from kafka_messages to relay_parked_messages in one
statement, fenced by the topic lock like every delete, and stages its ledger record.
Every later message of the same partitioning key (outbox_relay/schemas/0009) follows it there
(relay_message_problem refuses to send them) until an operator requeues or drops the parked one.
A row a session withholds is never parked (outbox_relay.control.withheld): its successor may be
in Kafka, and a requeued copy would follow it there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from outbox_relay.control.claims import TopicLimits
from outbox_relay.control.db import Database
from outbox_relay.control.locks import HELD
from outbox_relay.control.withheld import withheld_ids
from outbox_relay.rules.cloudevent_topics import sql_arrays
from outbox_relay.rules.outcomes import Outcome

_MOVE = f"""
moved AS (
    DELETE FROM kafka_messages m
    USING doomed d, kafka_topic_info i
    WHERE m.id = d.id AND i.topic = m.topic AND {HELD}
    RETURNING m.*, d.reason
),
parked AS (
    INSERT INTO relay_parked_messages
        (id, topic, message, key, partition_key, headers, created_at, reason, attempts, source)
    SELECT id, topic, message, key, partition_key, headers, created_at, reason, %(attempts)s,
           %(source)s
    FROM moved
    RETURNING topic, id, reason
),
staged AS (
    INSERT INTO relay_ledger_staging (session_id, topic, outcome, ids, source)
    SELECT gen_random_uuid(), topic, %(parked)s, array_agg(id ORDER BY id), %(source)s
    FROM parked GROUP BY topic
)
SELECT topic, id, reason FROM parked
"""

# The rows of the claim window that can never be sent, with every later row of their key.
# The window leaves out what sessions withhold (once per topic, not per row).
PARK_DOOMED = """
WITH spec AS (
    SELECT s.*, """ + withheld_ids("s.topic") + """ AS withheld
    FROM unnest(%(topics)s::varchar[], %(max_bytes)s::bigint[],
                %(key_required)s::bool[], %(cloudevents)s::bool[],
                %(type_required)s::bool[])
        AS s(topic, max_bytes, key_required, cloudevents, type_required)
),
window_rows AS (
    SELECT s.topic, c.id, relay_partitioning_key(c.partition_key, c.key) AS okey,
           relay_message_problem(c.id, s.topic, c.message, c.key, c.partition_key, c.headers,
                                 s.max_bytes, %(prefix)s, s.key_required, s.cloudevents,
                                 s.type_required) AS problem
    FROM spec s
    CROSS JOIN LATERAL (
        SELECT m.id, m.key, m.message, m.partition_key, m.headers FROM kafka_messages m
        WHERE m.topic = s.topic AND m.id <> ALL(s.withheld) ORDER BY m.id LIMIT %(limit)s
    ) c
),
doomed AS (
    SELECT id, problem AS reason FROM window_rows WHERE problem IS NOT NULL
    UNION
    SELECT later.id, format('message %%s of this key was parked before it', bad.id)
    FROM window_rows bad
    JOIN window_rows later
      ON later.topic = bad.topic AND later.okey = bad.okey AND later.id > bad.id
    WHERE bad.problem IS NOT NULL AND later.problem IS NULL
),
""" + _MOVE

# A whole topic's window: its name is illegal, or it does not exist in Kafka.
PARK_TOPIC = """
WITH doomed AS (
    SELECT id, %(reason)s::text AS reason FROM kafka_messages
    WHERE topic = %(topic)s AND id <> ALL(""" + withheld_ids("%(topic)s") + """)
    ORDER BY id LIMIT %(limit)s
),
""" + _MOVE

# One message that the broker refused for good, found by isolation.
PARK_ONE = """
WITH doomed AS (SELECT %(id)s::bigint AS id, %(reason)s::text AS reason),
""" + _MOVE

LIST = """
SELECT id, topic, octet_length(message) AS bytes, reason, attempts, source, parked_at
FROM relay_parked_messages
WHERE %(topic)s::varchar IS NULL OR topic = %(topic)s
ORDER BY topic, id
"""

# New ids from the sequence: the requeued messages go after everything already waiting.
REQUEUE = """
WITH back AS (
    DELETE FROM relay_parked_messages
    WHERE id = ANY(%(ids)s::bigint[]) OR topic = %(topic)s
    RETURNING *
)
INSERT INTO kafka_messages (topic, message, key, partition_key, headers, created_at)
SELECT topic, message, key, partition_key, headers, created_at FROM back ORDER BY id
RETURNING id
"""

# Recorded in the ledger as `dropped`, by whom, in the same statement as the delete.
DROP = """
WITH gone AS (
    DELETE FROM relay_parked_messages WHERE id = ANY(%(ids)s::bigint[])
    RETURNING id, topic
),
staged AS (
    INSERT INTO relay_ledger_staging (session_id, topic, outcome, ids, source, actor)
    SELECT gen_random_uuid(), topic, %(dropped)s, array_agg(id ORDER BY id), %(source)s,
           %(actor)s
    FROM gone GROUP BY topic
)
SELECT id FROM gone ORDER BY id
"""

PEEK = """
SELECT id, topic, key, partition_key, octet_length(message) AS bytes, headers, created_at,
       left(encode(message, 'escape'), 200) AS preview
FROM kafka_messages
WHERE topic = %(topic)s AND id >= %(from_id)s AND id <= %(to_id)s
ORDER BY id
LIMIT %(limit)s
"""


@dataclass(frozen=True)
class Parked:
    topic: str
    id: int
    reason: str


class Parking:
    def __init__(self, db: Database, token: str, lock_timeout_s: float, source_name: str,
                 header_prefix: str) -> None:
        self.db = db
        self.token = token
        self.lock_timeout_s = lock_timeout_s
        self.source_name = source_name
        self.header_prefix = header_prefix

    def _params(self, **extra: Any) -> dict[str, Any]:
        return {"token": self.token, "lock_timeout_s": self.lock_timeout_s,
                "source": self.source_name, "attempts": 0, "parked": Outcome.PARKED, **extra}

    def park_doomed(self, limits: Sequence[TopicLimits], limit: int) -> list[Parked]:
        """Park what the claim window of each topic holds that can never be sent."""
        if not limits:
            return []
        rows = self.db.all(PARK_DOOMED, self._params(
            topics=[t.topic for t in limits], max_bytes=[t.max_bytes for t in limits],
            key_required=[t.key_required for t in limits], **sql_arrays([t.flags for t in limits]),
            prefix=self.header_prefix, limit=limit))
        return [Parked(r["topic"], r["id"], r["reason"]) for r in rows]

    def park_topic(self, topic: str, reason: str, limit: int) -> list[Parked]:
        rows = self.db.all(PARK_TOPIC, self._params(topic=topic, reason=reason, limit=limit))
        return [Parked(r["topic"], r["id"], r["reason"]) for r in rows]

    def park_one(self, message_id: int, reason: str, attempts: int) -> list[Parked]:
        rows = self.db.all(PARK_ONE, self._params(id=message_id, reason=reason,
                                                  attempts=attempts))
        return [Parked(r["topic"], r["id"], r["reason"]) for r in rows]


def list_parked(db: Database, topic: str | None) -> list[dict[str, Any]]:
    return db.all(LIST, {"topic": topic})


def requeue(db: Database, ids: Sequence[int], topic: str | None) -> list[int]:
    return [r["id"] for r in db.all(REQUEUE, {"ids": list(ids), "topic": topic})]


def drop(db: Database, ids: Sequence[int], source: str, actor: str) -> list[int]:
    """Deletes parked messages for good; returns the ids that were parked."""
    params = {"ids": list(ids), "source": source, "actor": actor, "dropped": Outcome.DROPPED}
    return [r["id"] for r in db.all(DROP, params)]


def peek(db: Database, topic: str, from_id: int, to_id: int, limit: int) -> list[dict[str, Any]]:
    return db.all(PEEK, {"topic": topic, "from_id": from_id, "to_id": to_id, "limit": limit})

"""The driver's read of a batch's claimed rows, for the direct lane: one statement on the
lane's own control-plane connection, run on its own (one statement sees one snapshot),
through the same view the executors read (relay_claimed_messages,
outbox_relay/schemas/0011), in id order.

created_at comes as PostgreSQL's text, as the executors read it (outbox_relay.data.read
says why), and each row brings its topic's partition count, as the Spark lane's read
does (outbox_relay/schemas/0014).
"""

from __future__ import annotations

from outbox_relay.control.db import Database
from outbox_relay.direct.records import ClaimedRow

# One batch's rows; the view's filter on batch_id reaches relay_sessions' index. Only the
# topics asked for: a bisection or isolation sends a part of the batch.
READ_BATCH = """
SELECT c.id, c.topic, c.message, c.key, c.partition_key, c.created_at::text AS created_at,
       c.headers, i.partition_count
FROM relay_claimed_messages c
LEFT JOIN kafka_topic_info i ON i.topic = c.topic
WHERE c.batch_id = %(batch)s AND c.topic = ANY(%(topics)s::varchar[])
  AND c.id BETWEEN %(first)s AND %(last)s
ORDER BY c.id
"""

_ALL_IDS = (-(2**63), 2**63 - 1)


def read_batch(db: Database, batch_id: int, topics: list[str],
               ids: tuple[int, int] | None = None) -> list[ClaimedRow]:
    """The rows of `batch_id` for `topics`, with ids in `ids` when given, in id order."""
    first, last = ids or _ALL_IDS
    rows = db.rows(READ_BATCH, {"batch": batch_id, "topics": sorted(topics),
                                "first": first, "last": last})
    return [ClaimedRow(i, topic, _bytes(message), _bytes(key), pkey, created, headers, count)
            for i, topic, message, key, pkey, created, headers, count in rows]


def _bytes(value: object) -> bytes | None:
    # psycopg2 gives bytea as a memoryview.
    return None if value is None else bytes(value)  # type: ignore[call-overload]

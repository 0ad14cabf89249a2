"""Control-plane SQL of the ledger's staging table (rows are written by claims.finish)."""

from __future__ import annotations

from relay.control.db import Database

# Copy batches tagged but not yet removed: a crash hit between the Delta commit and the
# delete, or before the Delta write. Redone in order; Delta skips versions it has.
LEFTOVER_BATCHES = """
SELECT DISTINCT copy_batch FROM relay_ledger_staging
WHERE copy_batch IS NOT NULL ORDER BY copy_batch
"""

TAG_NEXT_BATCH = """
WITH b AS (SELECT nextval('relay_ledger_copy_seq') AS copy_batch)
UPDATE relay_ledger_staging SET copy_batch = (SELECT copy_batch FROM b)
WHERE copy_batch IS NULL
RETURNING copy_batch
"""

REMOVE_BATCH = "DELETE FROM relay_ledger_staging WHERE copy_batch = %s"

TRY_COPY_LOCK = "SELECT pg_try_advisory_lock(%s) AS locked"
COPY_UNLOCK = "SELECT pg_advisory_unlock(%s)"
COPY_LOCK_KEY = 7_301_455_123

STAGED_FOR = """
SELECT session_id::text, topic, outcome, source, relayed_at
FROM relay_ledger_staging
WHERE topic = %s AND %s = ANY(ids)
"""


def leftover_batches(db: Database) -> list[int]:
    return [r["copy_batch"] for r in db.all(LEFTOVER_BATCHES)]


def tag_next_batch(db: Database) -> int | None:
    rows = db.all(TAG_NEXT_BATCH)
    return rows[0]["copy_batch"] if rows else None


def remove_batch(db: Database, copy_batch: int) -> None:
    db.execute(REMOVE_BATCH, (copy_batch,))


def staged_for(db: Database, topic: str, message_id: int) -> list[dict[str, object]]:
    return db.all(STAGED_FOR, (topic, message_id))

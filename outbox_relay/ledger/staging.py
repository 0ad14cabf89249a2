"""Control-plane SQL of the ledger's staging table (rows are written by
outbox_relay.control.finish)."""

from __future__ import annotations

from typing import Any, cast

from outbox_relay.control.db import Database
from outbox_relay.errors import LockLostError
from outbox_relay.rules.partitioners import Partitioner, partition_for

# The copy sequence belongs to the database, so the Delta txnAppId is the database's
# identity: the cluster's system identifier and the database's oid (stable across a
# rename; a dump restored elsewhere starts a new identity along with a new sequence).
ORIGIN = """
SELECT 'outbox-relay:' || s.system_identifier || ':' || d.oid AS origin
FROM pg_control_system() AS s, pg_database AS d
WHERE d.datname = current_database()
"""

# Copy batches tagged but not yet removed: a crash hit between the Delta commit and the
# delete, or before the Delta write. Redone in order; Delta skips versions it has.
LEFTOVER_BATCHES = """
SELECT DISTINCT copy_batch FROM relay_ledger_staging
WHERE copy_batch IS NOT NULL ORDER BY copy_batch
"""

TRY_COPY_LOCK = "SELECT pg_try_advisory_lock(%s) AS locked, pg_backend_pid() AS backend"
COPY_LOCK_KEY = 7_301_455_123

# Whether this connection is still the backend that took the copy lock and still holds
# it. The control connection reconnects after a lost backend (a restart, a kill), and
# the new session holds no lock: every write to staging carries this condition, so it
# is checked in the same statement as the change it guards.
_HOLDS_COPY_LOCK = """
pg_backend_pid() = %(backend)s AND EXISTS (
    SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND pid = %(backend)s
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND classid = (%(key)s::bigint >> 32)::oid
      AND objid = (%(key)s::bigint & 4294967295)::oid AND objsubid = 1
)
"""

HOLDS_COPY_LOCK = f"SELECT {_HOLDS_COPY_LOCK} AS held"

COPY_UNLOCK = "SELECT pg_advisory_unlock(%(key)s) WHERE pg_backend_pid() = %(backend)s"

TAG_NEXT_BATCH = f"""
WITH b AS (SELECT nextval('relay_ledger_copy_seq') AS copy_batch)
UPDATE relay_ledger_staging SET copy_batch = (SELECT copy_batch FROM b)
WHERE copy_batch IS NULL AND {_HOLDS_COPY_LOCK}
RETURNING copy_batch
"""

# Delta skipped a batch: its app id already has this version or a higher one. The
# batch gets a fresh number above `floor` (the highest batch Delta holds) and the
# sequence moves past it, so the next tags are not skipped either.
RETAG_BATCH = f"""
WITH b AS (
    SELECT setval('relay_ledger_copy_seq',
                  GREATEST(nextval('relay_ledger_copy_seq'), %(floor)s)) AS copy_batch
)
UPDATE relay_ledger_staging SET copy_batch = (SELECT copy_batch FROM b)
WHERE copy_batch = %(batch)s AND {_HOLDS_COPY_LOCK}
RETURNING copy_batch
"""

# The ledger rows each staged record of a batch explodes into: what Delta must hold
# before the delete.
BATCH_RECORDS = """
SELECT session_id::text AS session_id, topic, outcome, sum(cardinality(ids))::bigint AS n
FROM relay_ledger_staging WHERE copy_batch = %s
GROUP BY 1, 2, 3
"""

REMOVE_BATCH = f"""
DELETE FROM relay_ledger_staging WHERE copy_batch = %(batch)s AND {_HOLDS_COPY_LOCK}
"""

# What stays staged: records (one per session, topic and outcome) and their messages.
STAGED_COUNT = """
SELECT count(*) AS records, coalesce(sum(cardinality(ids)), 0)::bigint AS messages
FROM relay_ledger_staging
"""

# The staged records of a message, of one topic or (topic NULL) of any. The span
# condition is what finds them through an index when the topic is not given (0013);
# `= ANY(ids)` is the exact test. The id's partitioning bytes sit at its position in the
# parallel array.
STAGED_FOR = """
SELECT session_id::text AS session_id, topic, %(id)s::bigint AS message_id, outcome, source,
       relayed_at, actor, topic_partitions, partitioner,
       partitioning_keys[array_position(ids, %(id)s::bigint)] AS partitioning_key
FROM relay_ledger_staging
WHERE relay_id_span(ids) @> %(id)s::bigint AND %(id)s::bigint = ANY(ids)
  AND (%(topic)s::varchar IS NULL OR topic = %(topic)s::varchar)
ORDER BY relayed_at, seq
"""


def staged_count(db: Database) -> tuple[int, int]:
    """(records, messages) in staging."""
    row = db.one(STAGED_COUNT) or {"records": 0, "messages": 0}
    return int(row["records"]), int(row["messages"])


def origin(db: Database) -> str:
    row = db.one(ORIGIN)
    assert row is not None  # current_database() is always in pg_database
    return str(row["origin"])


def try_copy_lock(db: Database) -> int | None:
    """The backend pid that now holds the copy lock, or None if another copier has it."""
    row = db.one(TRY_COPY_LOCK, (COPY_LOCK_KEY,))
    return int(row["backend"]) if row and row["locked"] else None


def _lock(backend: int, **params: int) -> dict[str, int]:
    return {"backend": backend, "key": COPY_LOCK_KEY, **params}


def ensure_copy_lock(db: Database, backend: int) -> None:
    row = db.one(HOLDS_COPY_LOCK, _lock(backend))
    if not row or not row["held"]:
        raise LockLostError(
            f"the ledger copy lost its lock (backend {backend} is gone); stopping this copy"
        )


def copy_unlock(db: Database, backend: int) -> None:
    db.all(COPY_UNLOCK, _lock(backend))


def leftover_batches(db: Database) -> list[int]:
    return [r["copy_batch"] for r in db.all(LEFTOVER_BATCHES)]


def tag_next_batch(db: Database, backend: int) -> int | None:
    rows = db.all(TAG_NEXT_BATCH, _lock(backend))
    return rows[0]["copy_batch"] if rows else None


def retag_batch(db: Database, backend: int, copy_batch: int, floor: int) -> int | None:
    """The batch's new number; None if it has no staged rows left."""
    rows = db.all(RETAG_BATCH, _lock(backend, batch=copy_batch, floor=floor))
    if not rows:
        ensure_copy_lock(db, backend)
        return None
    return int(rows[0]["copy_batch"])


def batch_records(db: Database, copy_batch: int) -> dict[tuple[str, str, str], int]:
    """Ledger rows per (session_id, topic, outcome) of a copy batch."""
    return {(r["session_id"], r["topic"], r["outcome"]): int(r["n"])
            for r in db.all(BATCH_RECORDS, (copy_batch,))}


def remove_batch(db: Database, backend: int, copy_batch: int) -> None:
    """Deletes a batch Delta holds; raises LockLostError if the lock went first."""
    if db.execute(REMOVE_BATCH, _lock(backend, batch=copy_batch)) == 0:
        ensure_copy_lock(db, backend)


def staged_for(db: Database, topic: str | None, message_id: int) -> list[dict[str, Any]]:
    """The staged records of a message (of any topic when `topic` is None), with the
    fields and names of a Delta ledger row (outbox_relay.ledger.delta.LEDGER_COLUMNS)."""
    rows = db.all(STAGED_FOR, {"topic": topic, "id": message_id})
    for r in rows:
        key = r.pop("partitioning_key")
        r["kafka_partition"] = kafka_partition(
            r["partitioner"], bytes(key) if key is not None else None, r["topic_partitions"])
    return rows


def kafka_partition(partitioner: str | None, key: bytes | None,
                    partitions: int | None) -> int | None:
    """The partition of a staged published record, as the Delta copy computes it (NULL
    where the producer chose, or nothing was recorded); pinned to it by a Spark test."""
    if partitioner not in ("murmur2", "crc32") or key is None or not partitions:
        return None
    return partition_for(cast(Partitioner, partitioner), key, partitions)

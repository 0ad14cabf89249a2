"""The ledger's copy outside the JVM: delta-rs writes a copy batch to a local Delta table.

Why: in a 1M-row drain of the shipped profile, the Spark copy at the drain's end took
22 s of its 65 s from launch to exit (loading Delta's classes, a JDBC read of staging,
the Arrow partitioner's Python worker, the write, auto compaction and a read back), and
a continuous relay's first copy loaded Delta into the JVM during its first minute, on the
cores its rounds needed. Here the same batch is read with psycopg2, exploded with numpy
and written by delta-rs in the driver's Python process.

Same contract as the Spark copy (outbox_relay.ledger.delta): one Delta commit per copy batch
carrying the app transaction (the outbox's origin, the batch number); a batch whose
version the app id already has is not written again; new columns are merged into an
older ledger; the caller deletes the batch from staging only once `held` counts all its
rows. The copy lock (outbox_relay.ledger.staging) keeps a second copier of the same outbox out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from outbox_relay.control.db import Database
from outbox_relay.errors import RelayError
from outbox_relay.ledger.delta_read import (
    columns_of,
    is_local,
    local_path,
    open_table,
    query,
    table_uri,
)
from outbox_relay.rules.murmur2_bulk import murmur2_partitions
from outbox_relay.rules.partitioners import partition_for

if TYPE_CHECKING:
    from pathlib import Path

    from deltalake import DeltaTable

# One staged record per row: its session's ids with their partitioning bytes (parallel),
# as text. psycopg2 parsed the arrays of a 1M-row batch in 1.6 s, their text arrives in
# 0.2 s and numpy parses the ids in 0.1 s. A key is hex, a NULL key "~" (no hex digit).
BATCH_ROWS = """
SELECT session_id::text AS session_id, topic, outcome, source, relayed_at, copy_batch,
       topic_partitions, partitioner, actor, array_to_string(ids, ',') AS ids,
       (SELECT string_agg(coalesce(encode(k, 'hex'), '~'), ',' ORDER BY o)
        FROM unnest(partitioning_keys) WITH ORDINALITY AS u(k, o)) AS partitioning_keys
FROM relay_ledger_staging WHERE copy_batch = %s ORDER BY seq
"""


def parsed(row: dict[str, Any]) -> dict[str, Any]:
    """A BATCH_ROWS row with its ids and keys as `exploded` takes them."""
    ids = np.array(row["ids"].split(","), dtype=np.int64) if row["ids"] else np.zeros(0, np.int64)
    keys = row["partitioning_keys"]
    return {**row, "ids": ids, "partitioning_keys": None if keys is None else [
        None if k == "~" else bytes.fromhex(k) for k in keys.split(",")]}


SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("message_id", pa.int64()),
    ("outcome", pa.string()),
    ("session_id", pa.string()),
    ("source", pa.string()),
    ("relayed_at", pa.timestamp("us", tz="UTC")),
    ("copy_batch", pa.int64()),
    ("origin", pa.string()),
    ("kafka_partition", pa.int32()),
    ("topic_partitions", pa.int32()),
    ("partitioner", pa.string()),
    ("actor", pa.string()),
])
# The per-record columns, repeated over each record's ids.
_RECORD_COLUMNS = ("topic", "outcome", "session_id", "source", "relayed_at", "copy_batch",
                   "topic_partitions", "partitioner", "actor")
# A copy leaves one small file; past this many files the table is compacted (what Delta's
# auto compaction does for the Spark copy), so the table stays cheap to read.
COMPACT_FILES = 64
# Opening the table replays its log from the last checkpoint, which delta-rs writes every
# 100 commits unless the table says otherwise; Delta's Spark writer every 10, as here, so
# a ledger opens as fast whichever writer copies (`ledger show`, `status` open it too).
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
CHECKPOINT_EVERY = 10


def exploded(records: list[dict[str, Any]], origin: str) -> pa.Table:
    """One ledger row per message of the staged records (their `ids` a sequence of ints,
    their `partitioning_keys` one of bytes or None, or None), with the Spark copy's columns
    and partitions (outbox_relay.ledger.rows.explode_staging; a test pins the two together)."""
    counts = np.array([len(r["ids"]) for r in records], dtype=np.int64)
    columns: dict[str, pa.Array] = {}
    for name in _RECORD_COLUMNS:
        values = pa.array([r[name] for r in records], type=SCHEMA.field(name).type)
        columns[name] = values.take(pa.array(np.repeat(np.arange(len(records)), counts)))
    ids = np.concatenate([np.asarray(r["ids"], dtype=np.int64) for r in records])
    keys = [None if k is None else bytes(k)
            for r in records
            for k in (r["partitioning_keys"] or [None] * len(r["ids"]))]
    columns["message_id"] = pa.array(ids, type=pa.int64())
    columns["origin"] = pa.repeat(pa.scalar(origin, pa.string()), len(ids))
    columns["kafka_partition"] = _partitions(
        keys, columns["topic_partitions"], columns["partitioner"])
    return pa.table([columns[f.name] for f in SCHEMA], schema=SCHEMA)


def _partitions(keys: list[bytes | None], counts: pa.Array, partitioners: pa.Array) -> pa.Array:
    """Each published row's partition by its record's partitioner; NULL where the
    producer chose (no key) or nothing was recorded. murmur2 is hashed a batch at a time;
    crc32, Deimos's, row by row: it is rare and zlib does the hashing."""
    chosen = partitioners.to_numpy(zero_copy_only=False)
    murmur = murmur2_partitions(pa.array(keys, type=pa.binary()), counts)
    partition = np.where(chosen == "murmur2", murmur.to_numpy(zero_copy_only=False), np.nan)
    n = counts.to_numpy(zero_copy_only=False)
    for i in np.flatnonzero(chosen == "crc32"):
        key = keys[i]
        if key is not None and n[i] > 0:
            partition[i] = partition_for("crc32", key, int(n[i]))
    known = ~np.isnan(partition)
    return pa.array(np.nan_to_num(partition).astype(np.int32), type=pa.int32(), mask=~known)


def _commit_file(path: str, version: int) -> Path:
    return local_path(path) / "_delta_log" / f"{version:020d}.json"


class DeltaRsCannotWrite(RelayError):
    """delta-rs cannot write the ledger at its path, and trying again would not change it."""


class DeltaRsUnsupported(DeltaRsCannotWrite):
    """The table has a protocol feature delta-rs does not write."""


# delta-rs 1.x words an object store's error as a chain of causes, one a line after an
# arrow, in terminal colours: "Generic LocalFileSystem error / Unable to rename file /
# Function not implemented (os error 38)". The first line alone names no cause.
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_CAUSE = "\u21b3"
# Transient: what the same write may get through on a later try, a copy interval on.
# - The network to object storage: a timeout, a connection reset, refused or closed, a
#   failed DNS look-up, a throttled or failing service (HTTP 429 or 5xx).
# - A commit that lost its version to another writer of the table (an operator's
#   `ledger maintain`; the copy lock keeps the outbox's other relays out): the next
#   copy reads the table again.
# Anything else fails alike on every try: a mount that refuses the commit's hard link or
# rename (a Databricks Volume), a refused permission, a read-only or full disk, data or
# a table delta-rs cannot write. Under `ledger.writer = "auto"` such a failure hands the
# copies to Delta's Spark writer for the rest of the run (outbox_relay.ledger.delta). A transient
# failure mistaken for one costs no more than that, so this list stays narrow.
_TRANSIENT = re.compile(
    r"timed out|timeout|connection (?:reset|refused|closed|aborted)|broken pipe"
    r"|error sending request|dns error|temporarily unavailable|too many requests"
    r"|slow ?down|throttl|service unavailable|bad gateway|internal server error"
    r"|status(?: code)?:? (?:429|5\d\d)\b"
    r"|existing table version|concurrent transaction", re.IGNORECASE)


def described(exc: BaseException) -> str:
    """delta-rs's error in one line with its causes ("Generic LocalFileSystem error:
    Unable to rename file: Function not implemented (os error 38)"), without a native
    backtrace that may follow them."""
    lines = [_COLOUR.sub("", line).strip() for line in str(exc).strip().splitlines()]
    if not lines or not lines[0]:
        return type(exc).__name__
    causes = []
    for line in lines[1:]:
        if not line.startswith(_CAUSE):
            break
        causes.append(line.removeprefix(_CAUSE).strip())
    return ": ".join([lines[0], *causes])


def transient(exc: BaseException) -> bool:
    """Whether a failed delta-rs write may succeed when it is tried again (see above)."""
    return (isinstance(exc, TimeoutError | ConnectionError)
            or _TRANSIENT.search(described(exc)) is not None)


class DeltaRsWriter:
    """Writes, counts and finds copy batches in a local Delta ledger with delta-rs."""

    def __init__(self, path: str, db: Database, origin: Callable[[], str]) -> None:
        self.path = path
        self._db = db
        self._origin = origin
        self._kept: DeltaTable | None = None

    def _table(self) -> DeltaTable | None:
        """The table as it is now. Opening replays the log since its last checkpoint
        (23 ms at 40 commits, and a copy looked three times): a local table is kept
        between copies and brought up to date with the commits since, unless its log no
        longer holds the version it was kept at (deleted, or made again)."""
        kept = self._kept
        if kept is not None and _commit_file(self.path, kept.version()).exists():
            try:
                kept.update_incremental()
                return kept
            except Exception:  # opened afresh below, which words the error
                pass
        self._kept = table = open_table(self.path)
        if table is not None and not is_local(self.path):
            self._kept = None  # no cheap look at an object store's log: opened each time
        return table

    def write(self, copy_batch: int) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake
        from deltalake.exceptions import DeltaProtocolError

        origin = self._origin()
        table = self._table()
        if table is not None and (table.transaction_version(origin) or 0) >= copy_batch:
            return  # Delta has this version of the app id: skipped, as Delta's Spark writer does
        records = [parsed(r) for r in self._db.all(BATCH_ROWS, (copy_batch,))]
        if not records:
            return
        data = exploded(records, origin)
        merge = table is not None and not set(SCHEMA.names) <= columns_of(table)
        try:
            write_deltalake(
                table if table is not None else table_uri(self.path), data, mode="append",
                schema_mode="merge" if merge else None,
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(origin, copy_batch)]),
            )
        except DeltaProtocolError as exc:
            raise DeltaRsUnsupported(f"ledger: delta-rs cannot write the table at "
                                     f"{self.path}: {described(exc)}") from exc
        except Exception as exc:  # delta-rs raises its own errors, OSError and pyarrow's
            failed = (RelayError if transient(exc) else DeltaRsCannotWrite)(
                f"ledger: delta-rs could not write copy batch {copy_batch} to "
                f"{self.path}: {described(exc)}")
            raise failed from exc
        # write_deltalake brought the table it was given up to its own commit; a table it
        # created is opened.
        self._after_commit(table if table is not None else self._table())

    def _after_commit(self, table: DeltaTable | None) -> None:
        """Compaction, past COMPACT_FILES files; and a checkpoint every CHECKPOINT_EVERY
        commits unless the table sets its own interval, which delta-rs then follows."""
        if table is None:
            return
        if len(table.file_uris()) > COMPACT_FILES:
            table.optimize.compact()
        version = table.version()
        if (version > 0 and version % CHECKPOINT_EVERY == 0
                and CHECKPOINT_INTERVAL not in table.metadata().configuration):
            table.create_checkpoint()

    def held(self, copy_batch: int) -> dict[tuple[str, str, str], int]:
        """Rows per staged record that Delta holds under this origin and batch number."""
        table = self._table()
        if table is None:
            return {}
        # Only integers go into the query's text (outbox_relay.ledger.delta_read): the origin is
        # compared here.
        origin = self._origin()
        rows = query(table,
                     "SELECT origin, session_id, topic, outcome, count(*) AS n FROM ledger "
                     f"WHERE copy_batch = {copy_batch:d} "
                     "GROUP BY origin, session_id, topic, outcome",
                     ("origin", "session_id", "topic", "outcome", "n"))
        return {(r["session_id"], r["topic"], r["outcome"]): int(r["n"])
                for r in rows if r["origin"] == origin}

    def last_batch(self) -> int:
        table = self._table()
        return int(table.transaction_version(self._origin()) or 0) if table else 0

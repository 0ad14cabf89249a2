"""The Delta ledger: the durable, exact history of what was relayed.

Staged session records are copied here off the latency path. Each copy batch is
written with txnAppId (the outbox database's identity, also each row's `origin`) and
txnVersion (the batch number), so a replay after a crash is skipped by Delta instead of
written twice. A batch leaves staging only once Delta is seen to hold all its rows, and
only while this copier still holds the copy lock on the backend that took it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import suppress

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outbox_relay import failpoints
from outbox_relay.config import Config
from outbox_relay.control.db import Database
from outbox_relay.data.read import jdbc_options
from outbox_relay.errors import DatabaseUnavailableError, RelayError
from outbox_relay.ledger import staging
from outbox_relay.ledger.delta_read import delta_rs_writes
from outbox_relay.ledger.delta_rs import DeltaRsCannotWrite, DeltaRsWriter
from outbox_relay.ledger.lookup import LedgerRecord, lookup
from outbox_relay.ledger.pause import pause, release
from outbox_relay.ledger.rows import (
    SessionRecord,
    explode_staging,
    missing_rows,
    session_counts,
)

log = logging.getLogger(__name__)

STAGING_TABLE = "relay_ledger_staging"
# The scheduler pool of the copies (outbox_relay/fairscheduler.xml): rounds' tasks go first.
LEDGER_POOL = "relay-ledger"
# The Spark job group of every job of a copy: what a stop cancels (Ledger.cancel_copy).
COPY_JOB_GROUP = "outbox-relay-ledger"


class Ledger:
    def __init__(self, spark: SparkSession | None, config: Config, db: Database) -> None:
        # None until the run's session is up (outbox_relay.launch.session): delta-rs copies
        # without it, Spark's copies wait for it.
        self._spark = spark
        self.path = config.ledger.path
        self.pg = config.postgres
        self.db = db
        self._origin: str | None = None
        # A stop's pause of the session's auto compaction (outbox_relay.ledger.pause), held until
        # the copy in flight, if any, has ended.
        self._state = threading.Lock()
        self._paused = self._copying = self._resume_due = False
        self._auto = config.ledger.writer == "auto"
        self._rs: DeltaRsWriter | None = None
        if delta_rs_writes(config.ledger.writer, self.path):
            self._rs = DeltaRsWriter(self.path, db, lambda: self.origin)

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            raise RelayError("ledger: the Spark session is not up yet")
        return self._spark

    def attach(self, spark: SparkSession) -> None:
        self._spark = spark

    @property
    def in_jvm(self) -> bool:
        """Whether the copies are Spark jobs (else delta-rs writes them in Python)."""
        return self._rs is None

    def waits_for_spark(self) -> bool:
        """Whether staged records wait for a session that is not attached: Spark writes
        the copies. False when PostgreSQL cannot say (the next run copies them)."""
        if not self.in_jvm or self._spark is not None:
            return False
        try:
            return staging.staged_count(self.db)[0] > 0
        except RelayError:
            return False

    @property
    def origin(self) -> str:
        """This outbox's Delta txnAppId, also recorded in each of its ledger rows."""
        if self._origin is None:
            self._origin = staging.origin(self.db)
        return self._origin

    def flush(self, stopping: Callable[[], bool] = lambda: False) -> int:
        """Copy every committed staged record to Delta; returns the batches copied.

        Once `stopping` holds, no further batch starts: what is left stays staged."""
        with self._state:
            self._copying = True
        try:
            return self._flush(stopping)
        finally:
            with self._state:
                self._copying = False
                if self._resume_due:
                    self._release()

    def _flush(self, stopping: Callable[[], bool]) -> int:
        if self._rs is None and self._spark is None:
            return 0  # Spark copies, once the run's session is up: staged records wait
        backend = staging.try_copy_lock(self.db)
        if backend is None:
            return 0  # another relay is copying; it takes our records too
        try:
            copied = 0
            for batch in staging.leftover_batches(self.db):
                if stopping():
                    return copied
                copied += self._copy(batch, backend)
            if stopping():
                return copied
            staging.ensure_copy_lock(self.db, backend)
            batch_id = staging.tag_next_batch(self.db, backend)
            if batch_id is not None:
                copied += self._copy(batch_id, backend)
            return copied
        finally:
            # A lost connection took the lock with it; don't hide why the copy stopped.
            with suppress(DatabaseUnavailableError):
                staging.copy_unlock(self.db, backend)

    def _copy(self, copy_batch: int, backend: int) -> int:
        """Writes one batch and deletes it from staging once Delta provably holds it."""
        if self._spark is not None:
            self._spark.sparkContext.setJobGroup(COPY_JOB_GROUP, "ledger copy", False)
            self._spark.sparkContext.setLocalProperty("spark.scheduler.pool", LEDGER_POOL)
        batch: int | None = copy_batch
        while batch is not None:
            records = staging.batch_records(self.db, batch)
            expected = sum(records.values())
            if expected == 0:
                return 0
            self._before_write(batch)
            staging.ensure_copy_lock(self.db, backend)
            log.debug("ledger: copy batch %d: %d rows to write", batch, expected)
            self._write(batch)
            log.debug("ledger: copy batch %d written", batch)
            missing = missing_rows(records, self._held(batch))
            if missing == 0:
                staging.remove_batch(self.db, backend, batch)
                log.info("ledger: copy batch %d is in Delta", batch)
                return 1
            if missing != expected:
                raise RelayError(
                    f"ledger: Delta holds {expected - missing} of the {expected} rows of copy "
                    f"batch {batch} from {self.origin}; the batch stays staged"
                )
            # Delta skipped the write: this app id already has that version or a later one
            # (the copy sequence went back, e.g. the database was restored).
            last = self._last_batch_in_delta()
            log.warning("ledger: Delta skipped copy batch %d (has %d); re-tagging", batch, last)
            batch = staging.retag_batch(self.db, backend, batch, last + 1)
        return 0

    def end_copies(self, cancel: bool) -> None:
        """For a stop: a copy in flight skips auto compaction, a post-commit step of its
        write that a later copy does as well (and took 14-19 s in the bench's SOAK,
        reports/performance-history.md); with `cancel`, its Spark jobs are cancelled.
        Callable from any thread; `resume` undoes it once the copy has ended."""
        if self._spark is None:
            return  # no Spark copy can be in flight
        with self._state:
            if not self._paused:
                pause(self._spark)
                self._paused = True
        if cancel:
            self._spark.sparkContext.cancelJobGroup(COPY_JOB_GROUP)

    def resume(self) -> None:
        """Gives the session back its auto compaction (outbox_relay.ledger.pause says which
        value), once the copy has ended: a copy the stop gave up waiting for may still be
        writing, and its write must not compact. That copy's end resumes then."""
        with self._state:
            if self._copying:
                self._resume_due = True
            else:
                self._release()

    def _release(self) -> None:
        """Under self._state."""
        if self._paused and self._spark is not None:
            release(self._spark)
            self._paused = False
        self._resume_due = False

    def staged_count(self) -> tuple[int, int]:
        return staging.staged_count(self.db)

    def _staged(self, copy_batch: int) -> DataFrame:
        staged = (
            self.spark.read.format("jdbc")
            .options(**jdbc_options(self.pg))
            .option("dbtable", STAGING_TABLE)
            .load()
            .where(F.col("copy_batch") == F.lit(copy_batch))
        )
        return explode_staging(staged, self.origin)

    def _write(self, copy_batch: int) -> None:
        if self._rs is not None:
            try:
                self._rs.write(copy_batch)
                return
            except DeltaRsCannotWrite as exc:
                if not self._auto:
                    raise
                # A path or table delta-rs cannot write, and trying again would not change
                # it (a mount that refuses its commit, a feature it lacks: outbox_relay.ledger.
                # delta_rs says which failures are transient): left to delta-rs, every copy
                # would fail and staging would grow. Spark writes this batch and the next.
                log.warning("%s; Delta's Spark writer copies the ledger from now on", exc)
                self._rs = None
        (
            self._staged(copy_batch)
            .write.format("delta")
            .mode("append")
            .option("mergeSchema", "true")  # ledgers written before `origin` existed
            .option("txnAppId", self.origin)
            .option("txnVersion", copy_batch)
            .save(self.path)
        )

    def _held(self, copy_batch: int) -> dict[SessionRecord, int]:
        """Rows per staged record that Delta holds under this origin and batch number."""
        if self._rs is not None:
            return self._rs.held(copy_batch)
        held = self._mine().where(F.col("copy_batch") == F.lit(copy_batch))
        return {(r["session_id"], r["topic"], r["outcome"]): int(r["rows"])
                for r in held.transform(session_counts).collect()}

    def _mine(self) -> DataFrame:
        return self.table().where(F.col("origin") == F.lit(self.origin))

    def _last_batch_in_delta(self) -> int:
        if self._rs is not None:
            return self._rs.last_batch()
        row = self._mine().agg(F.max("copy_batch").alias("last")).first()
        return int(row["last"]) if row and row["last"] is not None else 0

    def _before_write(self, copy_batch: int) -> None:
        """A seam for tests: the moment between tagging a copy batch and writing it."""
        failpoints.hold("ledger_copy_held")

    def lookup(self, topic: str, message_id: int) -> list[LedgerRecord]:
        """Every record of the message, in Delta and staged: outbox_relay.ledger.lookup's answer,
        which `ledger show` gives too (it reads Delta without Spark)."""
        return lookup(self.db, self.path, message_id, topic)

    def exists(self) -> bool:
        from delta.tables import DeltaTable

        return bool(DeltaTable.isDeltaTable(self.spark, self.path))

    def table(self) -> DataFrame:
        return self.spark.read.format("delta").load(self.path)

    def maintain(self, retention_hours: int) -> None:
        """OPTIMIZE then VACUUM: compaction and retention, run on the operator's schedule."""
        from delta.tables import DeltaTable

        if self.exists():
            table = DeltaTable.forPath(self.spark, self.path)
            table.optimize().executeCompaction()
            table.vacuum(retention_hours)

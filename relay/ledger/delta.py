"""The Delta ledger: the durable, exact history of what was relayed.

Staged session records are copied here off the latency path. Each copy batch is
written with txnAppId/txnVersion, so a replay after a crash is skipped by Delta
instead of written twice; one copier at a time holds an advisory lock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from relay.config import Config
from relay.control.db import Database
from relay.data.read import jdbc_options
from relay.ledger import staging

log = logging.getLogger(__name__)

STAGING_TABLE = "relay_ledger_staging"
LEDGER_APP_ID = "outbox-relay-ledger"
LEDGER_COLUMNS = (
    "topic",
    "message_id",
    "outcome",
    "session_id",
    "source",
    "relayed_at",
    "copy_batch",
)


def explode_staging(staged: DataFrame) -> DataFrame:
    """One ledger row per message from staged session records."""
    return staged.select(
        F.col("topic").cast("string").alias("topic"),
        F.explode("ids").alias("message_id"),
        F.col("outcome").cast("string").alias("outcome"),
        F.col("session_id").cast("string").alias("session_id"),
        F.col("source").cast("string").alias("source"),
        F.col("relayed_at").cast("timestamp").alias("relayed_at"),
        F.col("copy_batch").cast("bigint").alias("copy_batch"),
    )


@dataclass(frozen=True)
class LedgerEntry:
    topic: str
    message_id: int
    outcome: str
    session_id: str
    source: str
    relayed_at: Any
    where: str  # "delta" or "staging"


class Ledger:
    def __init__(self, spark: SparkSession, config: Config, db: Database) -> None:
        self.spark = spark
        self.path = config.ledger.path
        self.pg = config.postgres
        self.db = db

    def flush(self) -> int:
        """Copy every committed staged record to Delta; returns the batches copied."""
        locked = self.db.one(staging.TRY_COPY_LOCK, (staging.COPY_LOCK_KEY,))
        if not locked or not locked["locked"]:
            return 0  # another relay is copying; it takes our records too
        try:
            copied = 0
            for batch in staging.leftover_batches(self.db):
                self._copy(batch)
                copied += 1
            batch_id = staging.tag_next_batch(self.db)
            if batch_id is not None:
                self._copy(batch_id)
                copied += 1
            return copied
        finally:
            self.db.one(staging.COPY_UNLOCK, (staging.COPY_LOCK_KEY,))

    def _copy(self, copy_batch: int) -> None:
        self.spark.sparkContext.setJobGroup("outbox-relay-ledger", "ledger copy", False)
        staged = (
            self.spark.read.format("jdbc")
            .options(**jdbc_options(self.pg))
            .option("dbtable", STAGING_TABLE)
            .load()
            .where(F.col("copy_batch") == F.lit(copy_batch))
        )
        (
            staged.transform(explode_staging)
            .write.format("delta")
            .mode("append")
            .option("txnAppId", LEDGER_APP_ID)
            .option("txnVersion", copy_batch)
            .save(self.path)
        )
        staging.remove_batch(self.db, copy_batch)
        log.info("ledger: copy batch %d is in Delta", copy_batch)

    def lookup(self, topic: str, message_id: int) -> list[LedgerEntry]:
        """Every record of the message: in Delta, and staged but not yet copied."""
        found = [
            LedgerEntry(
                topic=topic,
                message_id=message_id,
                outcome=r["outcome"],
                session_id=r["session_id"],
                source=r["source"],
                relayed_at=r["relayed_at"],
                where="delta",
            )
            for r in self._delta_rows(topic, message_id)
        ]
        found += [
            LedgerEntry(
                topic,
                message_id,
                str(r["outcome"]),
                str(r["session_id"]),
                str(r["source"]),
                r["relayed_at"],
                "staging",
            )
            for r in staging.staged_for(self.db, topic, message_id)
        ]
        return found

    def _delta_rows(self, topic: str, message_id: int) -> list[Any]:
        if not self.exists():
            return []
        table = self.spark.read.format("delta").load(self.path)
        return table.where(
            (F.col("topic") == F.lit(topic)) & (F.col("message_id") == F.lit(message_id))
        ).collect()

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

"""The ledger's rows: their columns, the Spark copy's explode of staged records into
them (outbox_relay.ledger.delta_rs has its Arrow twin, pinned to it by a Spark test), and the
read-back counts that decide when a copy batch may leave staging."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from outbox_relay.data.partitioning import partition_col
from outbox_relay.data.partitioning_arrow import murmur2_partition_col

LEDGER_COLUMNS = (
    "topic",
    "message_id",
    "outcome",
    "session_id",
    "source",
    "relayed_at",
    "copy_batch",
    "origin",
    # Added later (mergeSchema adds them to an older ledger; its rows read NULL there):
    "kafka_partition",  # the partition a published record was written to; NULL: see below
    "topic_partitions",  # the topic's partition count when it was sent
    "partitioner",  # murmur2 or crc32; NULL on records from before these columns
    "actor",  # who skipped or dropped it (user@host); NULL for what a relay did
)
# One staged record: the ledger rows of one session, topic and outcome.
SESSION_RECORD = ("session_id", "topic", "outcome")
SessionRecord = tuple[str, str, str]


def explode_staging(staged: DataFrame, origin: str) -> DataFrame:
    """One ledger row per message from staged session records of the outbox `origin`.

    A published record's partition comes from its row's partitioning bytes (parallel to
    `ids`): crc32 by the sink's own expression (`partition_col`), murmur2 by its Arrow
    twin, which hashes a batch at a time (outbox_relay.data.partitioning_arrow says why). It is
    NULL where the producer chose it (a row with neither key nor partition_key,
    `partitioner` set), for what was never sent, and for records staged before the bytes
    were kept (`partitioner` NULL).
    """
    # Each id travels with its own bytes: exploding `ids` alone and indexing the keys
    # array made every exploded row carry that whole array, and the copy of a 1M-row
    # drain (sessions of 25,000 ids) ran the driver out of a 2 GB heap (bench W1, W4).
    # zip_with pads a missing array with NULLs: records staged before the keys were.
    keys = F.coalesce(F.col("partitioning_keys"), F.array().cast("array<binary>"))
    pairs = F.zip_with(F.col("ids"), keys,
                       lambda i, k: F.struct(i.alias("message_id"), k.alias("key")))
    exploded = staged.select(
        "topic", "outcome", "session_id", "source", "relayed_at", "copy_batch",
        "topic_partitions", "partitioner", "actor", F.explode(pairs).alias("pair"),
    ).select("*", F.col("pair.message_id").alias("message_id"), F.col("pair.key").alias("key"))
    key = F.col("key")
    n, partitioner = F.col("topic_partitions"), F.col("partitioner")
    partition = (
        F.when(partitioner == "murmur2", murmur2_partition_col(key, n))
        # No count, no partition: a remainder by 0 fails the whole copy under ANSI mode.
        .when((partitioner == "crc32") & (n > 0), partition_col("crc32", key, n))
    )
    return exploded.select(
        F.col("topic").cast("string").alias("topic"),
        F.col("message_id").cast("bigint").alias("message_id"),
        F.col("outcome").cast("string").alias("outcome"),
        F.col("session_id").cast("string").alias("session_id"),
        F.col("source").cast("string").alias("source"),
        F.col("relayed_at").cast("timestamp").alias("relayed_at"),
        F.col("copy_batch").cast("bigint").alias("copy_batch"),
        F.lit(origin).cast("string").alias("origin"),
        partition.cast("int").alias("kafka_partition"),
        n.cast("int").alias("topic_partitions"),
        partitioner.cast("string").alias("partitioner"),
        F.col("actor").cast("string").alias("actor"),
    )


def session_counts(ledger: DataFrame) -> DataFrame:
    """Ledger rows per staged record: (session_id, topic, outcome, rows)."""
    return ledger.groupBy(*SESSION_RECORD).agg(F.count(F.lit(1)).alias("rows")).select(
        *SESSION_RECORD, F.col("rows").cast("bigint").alias("rows")
    )


def missing_rows(expected: Mapping[SessionRecord, int], held: Mapping[SessionRecord, int]) -> int:
    """How many of the staged records' rows the ledger lacks.

    Counts per staged record, not rows: each record explodes into its own session's rows,
    and a session id is a fresh UUID, so rows under the same copy batch from another
    session (a batch number handed out again) are never counted for this one. Comparing
    counts reads only the batch's rows from Delta, where a row-by-row anti-join read and
    shuffled the whole batch twice (bench/, W1: most of the copy's time).
    """
    return sum(max(0, n - held.get(record, 0)) for record, n in expected.items())

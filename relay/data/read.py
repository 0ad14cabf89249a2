"""The executors' Spark JDBC read of the rows claimed in one micro-batch."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from relay.config import PostgresConfig

CLAIMED_VIEW = "relay_claimed_messages"
_INT_MIN = -(2**31)
_INT_MAX = 2**31 - 1
# created_at is `timestamp without time zone`: read as a java.sql.Timestamp it goes
# through the JVM's default zone, which spark-submit or Databricks chose, not us (and a
# wall clock in that zone's DST gap moves). PostgreSQL's own text of the value (ISO
# DateStyle, which pgjdbc sets) involves no zone. Binary transfer would rebuild that
# text from a Timestamp, so timestamps come as text.
_CREATED_AT_AS_TEXT = {"customSchema": "created_at STRING", "binaryTransferDisable": "TIMESTAMP"}


def jdbc_options(pg: PostgresConfig) -> dict[str, str]:
    """Connection options; the password travels as a property, never inside the URL."""
    options = {
        "url": pg.jdbc_url,
        "driver": "org.postgresql.Driver",
        "user": pg.user,
        "sslmode": pg.sslmode,
        "fetchsize": str(pg.fetch_size),
        "connectTimeout": str(pg.connect_timeout_s),
        "options": f"-c statement_timeout={pg.read_statement_timeout_ms} -c TimeZone=UTC",
        "ApplicationName": "outbox-relay-reader",
        # Binary transfer from the first execution: without it pgjdbc sends bytea as hex
        # text until a statement ran 5 times, which a one-shot Spark read never does. On
        # 200k rows of 1 KB the read took 1.6-2.0 s instead of 2.5-2.9 s (reports/bench.md).
        "prepareThreshold": "-1",
    }
    if pg.password is not None:
        options["password"] = pg.password.get_secret_value()
    return options


# The view's relation per session and read settings. load() asks PostgreSQL for the
# view's schema over a new connection (50-100 ms, on the latency path of every
# micro-batch); the relation itself holds no data and every action runs fresh queries,
# so one loaded relation serves every batch.
_RELATIONS: dict[tuple[int, PostgresConfig, int], DataFrame] = {}


def _claimed_relation(spark: SparkSession, pg: PostgresConfig, partitions: int) -> DataFrame:
    key = (id(spark), pg, partitions)
    relation = _RELATIONS.get(key)
    if relation is None or relation.sparkSession is not spark:
        reader = (
            spark.read.format("jdbc")
            .options(**jdbc_options(pg), **_CREATED_AT_AS_TEXT)
            .option("dbtable", CLAIMED_VIEW)
        )
        if partitions > 1:
            reader = (
                reader.option("partitionColumn", "key_hash")
                .option("lowerBound", str(_INT_MIN))
                .option("upperBound", str(_INT_MAX))
                .option("numPartitions", str(partitions))
            )
        relation = _RELATIONS[key] = reader.load()
    return relation


def read_claimed(
    spark: SparkSession, pg: PostgresConfig, batch_id: int, partitions: int
) -> DataFrame:
    """Rows of the batch's sessions, split into `partitions` tasks by the partitioning key.

    The view's key_hash hashes the partitioning bytes (relay_partitioning_key, the one
    definition the Kafka partition also comes from), so rows with equal bytes are read
    by one task, which is what per-key order needs; in_key_order then sorts each task
    by id. The batch filter is pushed down as a typed predicate.
    """
    relation = _claimed_relation(spark, pg, partitions)
    return relation.where(F.col("batch_id") == F.lit(batch_id))

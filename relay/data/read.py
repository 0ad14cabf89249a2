"""The executors' Spark JDBC read of the rows claimed in one micro-batch."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from relay.config import PostgresConfig

CLAIMED_VIEW = "relay_claimed_messages"
_INT_MIN = -(2**31)
_INT_MAX = 2**31 - 1


def jdbc_options(pg: PostgresConfig) -> dict[str, str]:
    """Connection options; the password travels as a property, never inside the URL."""
    options = {
        "url": pg.jdbc_url,
        "driver": "org.postgresql.Driver",
        "user": pg.user,
        "sslmode": pg.sslmode,
        "fetchsize": str(pg.fetch_size),
        "connectTimeout": str(pg.connect_timeout_s),
        "options": f"-c statement_timeout={pg.statement_timeout_ms} -c TimeZone=UTC",
        "ApplicationName": "outbox-relay-reader",
    }
    if pg.password is not None:
        options["password"] = pg.password.get_secret_value()
    return options


def read_claimed(
    spark: SparkSession, pg: PostgresConfig, batch_id: int, partitions: int
) -> DataFrame:
    """Rows of the batch's sessions, split into `partitions` tasks by the partitioning key.

    Splitting on a hash of the partitioning key keeps every key in one task, which is
    what per-key order needs. The batch filter is pushed down as a typed predicate.
    """
    reader = spark.read.format("jdbc").options(**jdbc_options(pg)).option("dbtable", CLAIMED_VIEW)
    if partitions > 1:
        reader = (
            reader.option("partitionColumn", "key_hash")
            .option("lowerBound", str(_INT_MIN))
            .option("upperBound", str(_INT_MAX))
            .option("numPartitions", str(partitions))
        )
    return reader.load().where(F.col("batch_id") == F.lit(batch_id))

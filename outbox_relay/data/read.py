"""The executors' Spark JDBC read of the rows claimed in the relay's current batch."""

from __future__ import annotations

import re
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession

from outbox_relay.config import PostgresConfig

CURRENT_BATCH_VIEW = "relay_current_batch_messages"
# The connection setting that names whose current batch the view shows (schemas/0011).
LOCK_TOKEN_SETTING = "relay.lock_token"
_INT_MIN = -(2**31)
_INT_MAX = 2**31 - 1
# created_at is `timestamp without time zone`: read as a java.sql.Timestamp it goes
# through the JVM's default zone, which spark-submit or Databricks chose, not us (and a
# wall clock in that zone's DST gap moves). PostgreSQL's own text of the value (ISO
# DateStyle, which pgjdbc sets) involves no zone. Binary transfer would rebuild that
# text from a Timestamp, so timestamps come as text.
_CREATED_AT_AS_TEXT = {"customSchema": "created_at STRING", "binaryTransferDisable": "TIMESTAMP"}


def jdbc_options(pg: PostgresConfig, settings: Mapping[str, str] | None = None
                 ) -> dict[str, str]:
    """Connection options; the password travels as a property, never inside the URL.

    `settings` are further server settings of the connection, sent with its start-up
    packet (`-c name=value`), never as SQL text.
    """
    server = {"statement_timeout": str(pg.read_statement_timeout_ms), "TimeZone": "UTC",
              **(settings or {})}
    options = {
        "url": pg.jdbc_url,
        "driver": "org.postgresql.Driver",
        "user": pg.user,
        "sslmode": pg.sslmode,
        "fetchsize": str(pg.fetch_size),
        "connectTimeout": str(pg.connect_timeout_s),
        "options": " ".join(f"-c {name}={_escaped(value)}" for name, value in server.items()),
        "ApplicationName": "outbox-relay-reader",
        # Binary transfer from the first execution: without it pgjdbc sends bytea as hex
        # text until a statement ran 5 times, which a one-shot Spark read never does. On
        # 200k rows of 1 KB the read took 1.6-2.0 s instead of 2.5-2.9 s (reports/bench.md).
        "prepareThreshold": "-1",
    }
    if pg.password is not None:
        options["password"] = pg.password.get_secret_value()
    return options


def _escaped(value: str) -> str:
    """A value as PostgreSQL's start-up options read it: they split on white space, and a
    backslash makes the next character literal."""
    return re.sub(r"([\\\s])", r"\\\1", value)


# The view's relation per session, token and read settings. load() asks PostgreSQL for
# the view's schema over a new connection (50-100 ms); the relation holds no data and
# every action runs fresh queries, so one loaded relation serves every batch.
_RELATIONS: dict[tuple[int, PostgresConfig, str, int], DataFrame] = {}


def read_current_batch(
    spark: SparkSession, pg: PostgresConfig, token: str, partitions: int
) -> DataFrame:
    """Rows of the latest batch that the relay holding `token` claimed, split into
    `partitions` tasks by the partitioning key.

    The view's key_hash hashes the partitioning bytes (relay_partitioning_key, the one
    definition the Kafka partition also comes from), so rows with equal bytes are read
    by one task, which is what per-key order needs; in_key_order then sorts each task
    by id. Which batch is current is the database's answer at read time, so the same
    DataFrame, analysed once, reads every batch.
    """
    key = (id(spark), pg, token, partitions)
    relation = _RELATIONS.get(key)
    if relation is None or relation.sparkSession is not spark:
        reader = (
            spark.read.format("jdbc")
            .options(**jdbc_options(pg, {LOCK_TOKEN_SETTING: token}), **_CREATED_AT_AS_TEXT)
            .option("dbtable", CURRENT_BATCH_VIEW)
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

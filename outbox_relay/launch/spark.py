"""Builds the SparkSession the relay runs in; the JVM packages come from
outbox_relay.launch.spark_jars."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from outbox_relay.config import Config
from outbox_relay.launch.spark_jars import cached_jars
from outbox_relay.ledger.delta_read import delta_rs_writes

# Option and property keys whose values must never reach a log line or a plan.
REDACTION_REGEX = r"(?i)secret|password|passwd|token|access[.]?key|jaas|credential"


# The driver's status store keeps every job, stage and SQL execution up to these counts
# (defaults 1,000 each, and 100,000 tasks a stage), with the UI off too: its listeners
# feed the status API. A continuous relay runs several jobs a second and never stops, so
# it reaches any cap within minutes and then holds that much history (plans, metrics)
# for good: the relay reads none of it, so it keeps little. An operator's spark.conf
# still overrides these.
STATUS_RETENTION = {
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "1000",
    "spark.ui.retainedDeadExecutors": "10",
    "spark.sql.ui.retainedExecutions": "50",
    "spark.sql.streaming.ui.retainedQueries": "10",
    "spark.sql.streaming.ui.retainedProgressUpdates": "20",
    "spark.sql.streaming.numRecentProgressUpdates": "20",
}


# The session's Python workers when it runs no Python UDF (python_udfs below): they
# only plan the streaming source (its lookup, its creation, each micro-batch's read). By
# default each kind kept a daemon and an idle worker: five processes, 0.38 GB resident
# at 500 msg/s beside 0.87 GB for the rest of the relay. Without them a micro-batch's
# plan starts its worker afresh, once per relay.micro_batch_s. With a UDF the defaults
# stay: a transformed round took 1.2 s instead of 0.45 s without the daemon.
WORKERS_WITHOUT_UDFS = {"spark.python.use.daemon": "false", "spark.python.worker.reuse": "false"}


def python_udfs(config: Config) -> bool:
    """Whether the session runs Python UDFs: a topic's transform (its row counter), or the
    ledger's Spark writer (its Arrow partitioner)."""
    return (any(rule.transform is not None for rule in config.relay.topic_rules)
            or not delta_rs_writes(config.ledger.writer, config.ledger.path))


def base_conf(config: Config) -> dict[str, str]:
    conf = {
        "spark.ui.enabled": "false",
        # Spark's INFO lines would bury the relay's own; applied when the context starts.
        "spark.log.level": "WARN",
        "spark.sql.shuffle.partitions": str(config.spark.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.redaction.regex": REDACTION_REGEX,
        "spark.sql.redaction.options.regex": r"(?i)url|" + REDACTION_REGEX[4:],
        # The Python workers that run the streaming source must find our dependencies.
        "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "spark.sql.streaming.stopTimeout": "60000",
        # A relay killed while Spark wrote its checkpoint's first entry leaves that
        # entry's temporary file; with this check on, every later start then failed
        # (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY) until an operator deleted the
        # checkpoint. The relay's offsets mean nothing (the outbox is the truth), and
        # a checkpoint that holds a batch is resumed without this check anyway. It is the
        # session's, not the query's: Spark reads it in the query's own thread after
        # start() returned (tests/spark/test_checkpoint_check.py), so no setting around
        # start() scopes it; docs/databricks.md says what that means for a shared session.
        "spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart": "false",
        # Small ledger tables: the default 50 snapshot partitions cost 50 tasks per read.
        "spark.databricks.delta.snapshotPartitions": "2",
        # Every ledger copy adds a small file: once 10 are there, the copy that made them
        # so compacts them (after its commit, in the ledger's pool), so a relay that runs
        # for months keeps a bounded snapshot without `ledger maintain`. Files replaced
        # stay on disk until that command's VACUUM, after `ledger.retention_hours`.
        "spark.databricks.delta.autoCompact.enabled": "true",
        "spark.databricks.delta.autoCompact.minNumFiles": "10",
        # Only files below half this size are compacted again. At Delta's 128 MB a
        # compacted file was rewritten with each next ten copies until it passed 64 MB:
        # ever larger rewrites beside the rounds (reports/performance-history.md, SOAK: the copy
        # that compacted ten 1.5 MB files took 14-19 s, the others 4 s). At 16 MB each row is
        # rewritten at most about twice and no compaction rewrites more than about 16 MB.
        "spark.databricks.delta.autoCompact.maxFileSize": str(16 * 1024 * 1024),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        **STATUS_RETENTION,
        **({} if python_udfs(config) else WORKERS_WITHOUT_UDFS),
    }
    pools = Path(__file__).parent.parent / "fairscheduler.xml"
    if pools.is_file():  # not when the relay is imported from a zip (--py-files)
        # A ledger copy must not hold the cores a round's write waits for.
        conf["spark.scheduler.mode"] = "FAIR"
        conf["spark.scheduler.allocation.file"] = str(pools)
    conf.update(config.spark.conf)
    if config.spark.resolve_packages and not under_spark_submit():
        # Outside spark-submit pyspark starts the JVM itself, with this configuration.
        # (Under spark-submit the JVM runs already: spark-defaults.conf brought the jars,
        # or outbox_relay.app ran it once more with them.)
        jars = [str(j) for j in cached_jars()]
        conf["spark.jars"] = ",".join([*jars, *filter(None, conf.get("spark.jars", "").split(","))])
    return conf


def under_spark_submit() -> bool:
    """spark-submit started this Python, and its JVM runs already (pyspark finds it here)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


def submitted_master() -> str | None:
    """The master spark-submit was given (its default is local[*]); None outside spark-submit."""
    if not under_spark_submit():
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return SparkConf().get("spark.master")


def backlogs_on_driver(config: Config) -> bool:
    """relay.backlog_lane resolved: whether the driver's producer sends backlogs too. Under
    "auto", it does when the master is local (spark-submit's wins over the profile's, as
    in build_session), where the executors run on the driver's own cores."""
    lane = config.relay.backlog_lane
    if lane != "auto":
        return lane == "direct"
    master = submitted_master() or config.spark.master
    return master is not None and master.startswith("local")


def build_session(config: Config) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(config.spark.app_name)
    # The command line is more specific than the profile: `spark-submit --master
    # spark://...` runs on that cluster even when the profile names local[2].
    if config.spark.master and submitted_master() is None:
        builder = builder.master(config.spark.master)
    for key, value in base_conf(config).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()

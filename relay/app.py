"""The relay's main(): parse arguments, build, run, report. Shared by jobs/relay.py and the CLI."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence

from relay.config import Config
from relay.config_load import load_config
from relay.control.db import Database
from relay.control.kafka_admin import KafkaAdmin
from relay.control.migrate import discover
from relay.errors import ConfigError, RelayError, exit_code_of
from relay.packages import SPARK_PACKAGES, spark_packages_conf
from relay.stream.runner import RunResult

log = logging.getLogger("relay")

LATEST_MIGRATION = "SELECT coalesce(max(version), 0) AS version FROM relay_schema_migrations"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="relay", description="Relay the PostgreSQL outbox to Kafka.")
    p.add_argument("--config", help="TOML profile, e.g. conf/local.toml")
    p.add_argument(
        "--available-now",
        action="store_true",
        help="drain what exists, then exit (0 only when drained)",
    )
    p.add_argument("--log-level", default=os.environ.get("RELAY_LOG_LEVEL", "INFO"))
    return p


def preflight(config: Config) -> None:
    """Fail fast, with one line naming the service, if something needed is not there."""
    db = Database(config.postgres, "outbox-relay-preflight")
    try:
        row = db.one(LATEST_MIGRATION)
    except RelayError as exc:
        if "relay_schema_migrations" in str(exc):
            raise ConfigError(
                "the database has no relay schema: run `outbox-relay migrate`"
            ) from None
        raise
    finally:
        db.close()
    latest = max(m.version for m in discover())
    if row is None or row["version"] < latest:
        raise ConfigError("the database schema is behind: run `outbox-relay migrate`")
    KafkaAdmin(config.kafka).check_reachable()


def relaunch_without_spark_submit_if_needed(config: Config) -> int | None:
    """spark-submit started the driver JVM without our packages: relaunch as plain Python,
    and return the relaunched driver's exit code (None: no relaunch needed).

    Plain Python lets pyspark start a JVM with spark.jars.packages from relay.packages,
    so `spark-submit jobs/relay.py` works without repeating the package list. Passing
    `--packages "$(outbox-relay packages)"` avoids this hop.
    """
    if not config.spark.resolve_packages or not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    jvm_conf = SparkConf()
    present = (jvm_conf.get("spark.jars.packages") or "") + (jvm_conf.get("spark.jars") or "")
    if all(pkg.split(":")[1] in present for pkg in SPARK_PACKAGES):
        return None
    log.info("spark-submit lacks %s; relaunching the driver to resolve them", spark_packages_conf())
    from relay.launcher import Launcher

    return Launcher(SparkContext._jvm, SparkContext._gateway).run()


def print_summary(result: RunResult) -> None:
    stats = result.stats
    topics = sorted(set(stats.published) | set(stats.compacted) | set(stats.parked))
    print(
        f"outbox-relay: {sum(stats.published.values())} messages delivered "
        f"in {result.seconds:.1f} s ({stats.batches} batches)"
    )
    for topic in topics:
        line = f"  {topic}: {stats.published[topic]} delivered"
        if stats.compacted[topic]:
            line += f", {stats.compacted[topic]} compacted"
        if stats.parked[topic]:
            line += f", {stats.parked[topic]} parked"
        print(line)
    for s in result.left_over:
        why = (
            f"locked by {s.locked_by}"
            if s.state == "locked"
            else (
                f"in error after {s.retries} retries: {s.last_error}"
                if s.state == "backoff"
                else "not drained"
            )
        )
        print(f"left over: topic {s.topic}: {why}")
    if result.unverified:
        print(result.unverified)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from relay.stream.stop import StopSignal

    stop = StopSignal()
    stop.install()
    try:
        config = load_config(args.config)
        relaunched = relaunch_without_spark_submit_if_needed(config)
        if relaunched is not None:
            return relaunched
        preflight(config)
        from relay.spark import build_session
        from relay.stream.runner import run
        from relay.wiring import build_relay

        relay = build_relay(config, build_session(config))
        # pyspark's SparkContext replaced our SIGINT handler with one that cancels every
        # job and raises KeyboardInterrupt: a SIGINT must stop gracefully, like SIGTERM.
        stop.install()
        try:
            result = run(relay, args.available_now, stop)
        finally:
            relay.close()
    except Exception as exc:
        return exit_code_of(exc)
    print_summary(result)
    return result.exit_code

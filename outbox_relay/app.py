"""The relay's main(): parse arguments, build, run, report. Shared by jobs/relay.py and the CLI."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from outbox_relay.errors import ConfigError, exit_code_of, first_line, logged_exit_code
from outbox_relay.exit_codes import ExitCode
from outbox_relay.launch.extras import require_relay_extra, require_spark_extra
from outbox_relay.launch.interpreter import prefer_installed_pyspark, tune_collector
from outbox_relay.launch.launcher import announce_ready
from outbox_relay.launch.spark_jars import (
    cached_jars,
    has_relay_jars,
    install_spark_defaults,
    own_spark_conf_dir,
)
from outbox_relay.observe.logs import configure_logging
from outbox_relay.options import add_global_options, profile
from outbox_relay.stream.budget import budget_seconds
from outbox_relay.stream.stop import StopSignal, forward_submitting_jvm_signals

if TYPE_CHECKING:
    # Not at import: they import pydantic and pyspark, which the base install lacks and
    # main() looks for first (outbox_relay.launch.extras).
    from outbox_relay.config import Config
    from outbox_relay.stream.runner import RunResult

log = logging.getLogger("outbox_relay")


def parser() -> argparse.ArgumentParser:
    """jobs/relay.py's: the global options of `outbox-relay` (RELAY_CONFIG included),
    --available-now and --time-budget-s."""
    p = argparse.ArgumentParser(prog="relay", description="Relay the PostgreSQL outbox to Kafka.")
    add_global_options(p)
    p.add_argument(
        "--available-now",
        action="store_true",
        help="drain what exists, then exit (0 only when drained)",
    )
    p.add_argument(
        "--time-budget-s",
        type=budget_seconds,
        metavar="S",
        help="with --available-now: claim nothing after S seconds from the start, finish "
        "the round in flight, exit 1 if rows are left; default: relay.available_now_budget_s",
    )
    return p


def preflight(config: Config) -> None:
    """Fail fast, with one line naming the service, if something needed is not there."""
    from outbox_relay.control.kafka_admin import KafkaAdmin
    from outbox_relay.control.migrate import check_schema

    # A relay of several databases checks each one as it starts relaying it, so that one
    # it cannot reach does not hold the others back (outbox_relay.stream.many).
    if not config.many:
        check_schema(config.postgres)
    KafkaAdmin(config.kafka).check_reachable()
    for _, one in config.each_database():
        check_transforms(one)


def check_transforms(config: Config) -> None:
    """Every transform a topic rule names imports and is callable (its contract is
    checked on the executors, outbox_relay.data.transform)."""
    from outbox_relay.data.transform import load_transform

    for i, rule in enumerate(config.relay.topic_rules):
        if rule.transform is not None:
            try:
                load_transform(rule.transform)
            except ConfigError as exc:
                raise ConfigError(f"relay.topic_rules.{i}.transform: {exc}") from None


def _take_stop_signals(stop: StopSignal) -> None:
    """TERM and INT to spark-submit's JVM stop the relay from now on (before, its own
    handler ended spark-submit with 143); a launcher of this driver may pass a stop on."""
    try:
        forward_submitting_jvm_signals(stop)
    except Exception as exc:  # the relay still stops on its own Python's signals
        log.warning("cannot take spark-submit's stop signals: %s", exc)
    announce_ready()
    log.debug("start-up: stop signals are taken")


def resubmit_with_jars_if_needed(config: Config, stop: StopSignal, available_now: bool,
                                 before_launch: Callable[[], None] = lambda: None,
                                 ) -> int | None:
    """Under a spark-submit whose driver JVM lacks the relay's jars (first use, before
    `outbox-relay jars --install`): install them for the next start when this Spark is
    the venv's own, and run this once more as a spark-submit that has them. Returns that
    run's exit code; None when nothing was missing. A stop that came before that run
    started ends it unstarted, as the relay's own run would end (outbox_relay.exit_codes)."""
    from outbox_relay.launch.spark import submitted_master

    if not config.spark.resolve_packages or submitted_master() is None:
        return None
    from pyspark import SparkConf, SparkContext

    conf = SparkConf()
    if has_relay_jars(conf.get("spark.jars"), conf.get("spark.jars.packages")):
        return None
    jars = [str(j) for j in cached_jars()]
    hint = "`outbox-relay jars --install` writes them into spark-defaults.conf"
    if own_spark_conf_dir():
        hint = f"installed into {install_spark_defaults()} for later starts"
    log.warning("spark-submit started without the relay's jars: running it once more with "
                "them (%s)", hint)
    from outbox_relay.launch.launcher import Launcher, resubmit_argv

    before_launch()  # the stop signals taken first: the launcher's own replace them
    with tempfile.TemporaryDirectory(prefix="outbox-relay-") as tmp:
        argv = resubmit_argv(conf.getAll(), jars, Path(tmp) / "spark.properties")
        stopped = ExitCode.INTERRUPTED if available_now else ExitCode.OK
        return Launcher(SparkContext._jvm, SparkContext._gateway).run(
            argv, kept=lambda: stop.requested, stopped_code=stopped)


def print_summary(result: RunResult) -> None:
    stats = result.stats
    topics = sorted(set(stats.published) | set(stats.compacted) | set(stats.parked))
    print(
        f"outbox-relay: {sum(stats.published.values())} messages delivered "
        f"in {result.seconds:.1f} s ({stats.batches} batches)"
    )
    if stats.lanes:
        print(f"outbox-relay: {stats.lanes['direct']} by the driver's producer, "
              f"{stats.lanes['spark']} by Spark's executors")
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
        ran_out = f" ({result.out_of_time})" if result.out_of_time else ""
        print(f"left over: topic {s.topic}: {why}{ran_out}")
    if result.unverified:
        print(result.unverified)


def _run_many(config: Config, available_now: bool, stop: StopSignal, launched: float) -> int:
    from outbox_relay.launch.session import SparkSource
    from outbox_relay.launch.spark import build_session
    from outbox_relay.stream.many import run_many

    result = run_many(config, available_now, stop, SparkSource(lambda: build_session(config)),
                      started=launched)
    for outcome in result.outcomes:
        print(f"database {outcome.name}:")
        if outcome.result is not None:
            print_summary(outcome.result)
        else:
            print(f"not relayed: {first_line(outcome.error or RuntimeError())} "
                  f"(exit code {outcome.exit_code})")
    print(f"outbox-relay: {len(result.outcomes)} databases in {result.seconds:.1f} s, "
          f"exit code {result.exit_code}")
    return result.exit_code


def _progress_stream(args: argparse.Namespace) -> TextIO | None:
    """Where an available-now drain draws its progress line: a terminal's stderr only,
    and never among JSON logs."""
    if args.available_now and args.log_format == "text" and sys.stderr.isatty():
        return sys.stderr
    return None


def _without_spark_progress_bar(config: Config) -> Config:
    """Spark's console progress bar draws on the same terminal line as ours; a profile
    that sets spark.ui.showConsoleProgress keeps its choice."""
    conf = {"spark.ui.showConsoleProgress": "false", **config.spark.conf}
    return config.model_copy(update={"spark": config.spark.model_copy(update={"conf": conf})})


def _with_time_budget(config: Config, seconds: float | None) -> Config:
    """The profile with `--time-budget-s`, which wins over its own budget."""
    if seconds is None:
        return config
    relay = config.relay.model_copy(update={"available_now_budget_s": seconds})
    return config.model_copy(update={"relay": relay})


def main(argv: Sequence[str] | None = None) -> int:
    launched = time.monotonic()  # a drain's time budget counts from here
    tune_collector()
    prefer_installed_pyspark()
    args = parser().parse_args(argv)
    if args.time_budget_s is not None and not args.available_now:
        parser().error("--time-budget-s bounds a drain: it needs --available-now")
    configure_logging(args.log_level, args.log_format)
    log.debug("start-up: the relay's Python runs")
    stop = StopSignal()
    stop.install()
    # What a stop before the first round ends the run with: nothing was drained.
    stopped = ExitCode.INTERRUPTED if args.available_now else ExitCode.OK
    try:
        require_spark_extra()  # first: [spark] brings [relay] too
        require_relay_extra()
        # Beside the start-up: its callback server takes most of a second that the first
        # round need not wait for (a launcher first waits for it, see announce_ready).
        signals = threading.Thread(target=_take_stop_signals, args=(stop,),
                                   name="relay-stop-signals", daemon=True)
        signals.start()
        config = _with_time_budget(profile(args), args.time_budget_s)
        relaunched = resubmit_with_jars_if_needed(config, stop, args.available_now,
                                                  before_launch=signals.join)
        if relaunched is not None:
            return relaunched
        if stop.requested:
            return stopped
        preflight(config)
        log.debug("start-up: the services answer")
        progress = _progress_stream(args)
        if progress is not None:
            config = _without_spark_progress_bar(config)
        from outbox_relay.launch.session import SparkSource
        from outbox_relay.launch.spark import build_session
        from outbox_relay.stream.runner import run
        from outbox_relay.wiring import build_relay

        if config.many:
            return _run_many(config, args.available_now, stop, launched)
        # The session is built beside the first rounds, which the driver's producer sends
        # (outbox_relay.launch.session): in a thread of its own, pyspark leaves our SIGINT
        # handler in place.
        relay = build_relay(config, None)
        log.debug("start-up: the relay is wired")
        try:
            if stop.requested:
                return stopped
            source = SparkSource(lambda: build_session(config))
            result = run(relay, args.available_now, stop, progress, source, started=launched)
        finally:
            relay.close()
    except KeyboardInterrupt:
        # pyspark's SIGINT handler, in the moment before ours took over again: a stop
        # before the first round.
        log.warning("stop requested (SIGINT while Spark started)")
        return stopped
    except Exception as exc:
        if args.log_format == "json":
            return logged_exit_code(exc, log)
        return exit_code_of(exc)
    print_summary(result)
    return result.exit_code

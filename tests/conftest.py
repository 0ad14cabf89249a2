"""Session-wide fixtures shared by every test suite."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator

import pytest

import outbox_relay.stack
from outbox_relay.launch.spark_jars import install_spark_defaults, own_spark_conf_dir
from outbox_relay.stack import StackInfo

pytest_plugins = ["tests.spark_session"]

# Tests talk to 127.0.0.1 only: Spark's driver (and every relay process started from
# here) binds there too, instead of the host's first interface.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

# The Airflow tier runs in its own venv (tests/airflow/conftest.py says why);
# tests/integration/test_airflow_dags.py starts it.
collect_ignore = ["airflow"]


@pytest.fixture(scope="session")
def spark_defaults() -> None:
    """spark-submit finds the relay's jars in spark-defaults.conf, as `make setup` leaves
    them (outbox_relay.launch.spark_jars); a Spark that is not the venv's own is left alone."""
    if own_spark_conf_dir():
        install_spark_defaults()


@pytest.fixture(scope="session")
def stack(spark_defaults: None) -> Iterator[StackInfo]:
    """The shared local PostgreSQL + Kafka stack, started on demand.

    A stack that was already up (e.g. via `stack up`) is left running; one this
    session started is stopped at the end unless RELAY_KEEP_STACK=1.
    """
    was_up = outbox_relay.stack.status() is not None
    info = outbox_relay.stack.up()
    yield info
    if not was_up and os.environ.get("RELAY_KEEP_STACK") != "1":
        outbox_relay.stack.down()


# The time of each tier (tests/<tier>/...) and of its slowest files, setup and teardown
# included, for CI's log: the suite must fit its budget, and this says what to trim.
_TIER_SECONDS: defaultdict[str, float] = defaultdict(float)
_FILE_SECONDS: defaultdict[str, float] = defaultdict(float)
_SLOWEST_FILES = 30


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::")[0]
    parts = path.split("/")
    _TIER_SECONDS[parts[1] if len(parts) > 2 else parts[0]] += report.duration
    _FILE_SECONDS[path] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_sep("-", "time per tier")
    for tier, seconds in sorted(_TIER_SECONDS.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{tier}: {seconds:.0f} s")
    terminalreporter.write_sep("-", f"time of the {_SLOWEST_FILES} slowest files")
    slowest = sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:_SLOWEST_FILES]
    for path, seconds in slowest:
        terminalreporter.write_line(f"{seconds:7.0f} s  {path}")

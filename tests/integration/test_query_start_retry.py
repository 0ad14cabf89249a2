"""The streaming query's start on a loaded machine: its source's Python worker must connect
back to the JVM within 10 s (Spark's PythonWorkerFactory). Three relays starting on two
cores once ran out of that wait, and the relay exited having delivered nothing. Here the
source's worker is made late on purpose (a python wrapper that sleeps before the first one
starts), as a real spark-submit process; the relay starts the query again and delivers,
unless a stop came meanwhile: then the run ends as that stop ends it."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import Msg, consume, create_topics, insert, query, unique, wait_for
from tests.integration.process import kill_group, signal_group, spark_submit, write_profile
from tests.integration.transforms_for_tests import HOLD_S

pytestmark = pytest.mark.integration

# The streaming source's worker is started as `python -m <this module>`; only its first
# start is made late (the marker directory), past the JVM's 10 s wait.
_LATE_WORKER = """#!/bin/sh
case "$*" in
  *python_streaming_source_runner*)
    if mkdir "{marker}" 2>/dev/null; then sleep 14; fi ;;
esac
exec "{python}" "$@"
"""


def test_a_source_worker_too_late_to_connect_back_starts_the_query_again(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, tmp_path: Path,
) -> None:
    topic = unique("late-worker")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    config = make_config([topic])
    log_path = tmp_path / "relay.log"
    proc = spark_submit(write_profile(config, tmp_path / "relay.toml"), log=log_path,
                        env={"PYSPARK_PYTHON": _late_python(tmp_path)})

    def log() -> str:
        return log_path.read_text(errors="replace")

    try:
        assert wait_for(lambda: "starting it again (attempt 2 of 3)" in log(), 240,
                        interval_s=0.5), log()[-4000:]
        assert (tmp_path / "made-late").is_dir()
        # Keys of every shape, written after the retry: the restarted query delivers them.
        messages = [Msg(topic, None, b"keyless"), Msg(topic, b"\x00\xff", b"binary"),
                    Msg(topic, b"k", b"pk-equal", "k"), Msg(topic, b"k", b"pk-other", "g-7")]
        ids = insert(migrated_url, [messages])
        got = consume(stack.kafka_bootstrap, [topic], expect=len(ids), timeout_s=180)
        assert sorted(r.outbox_id for r in got) == sorted(ids)
        assert wait_for(lambda: not query(migrated_url, "SELECT 1 FROM kafka_messages"), 60)
        signal_group(proc, signal.SIGTERM)
        assert proc.wait(timeout=120) == EXIT_OK, log()[-4000:]
    finally:
        kill_group(proc)
    assert "Python worker failed to connect back" in log()


def test_a_drain_whose_budget_runs_out_while_its_query_fails_to_start_exits_left_over(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, tmp_path: Path,
) -> None:
    """The first round holds its write for HOLD_S; meanwhile the query's start times out
    and the drain's time budget runs out. A new start would only be stopped again, and
    nothing of the query ran: the drain exits LEFT_OVER, as a budget ends it, with what
    the round deleted in Kafka and no lock held (it exited 5, QUERY_FAILED)."""
    topic = unique("late-budget")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    # More than one claim: the first round's claim stops at its limit, which starts the
    # query beside the round's write.
    messages = [Msg(topic, b"k", b"hold-me"), *(Msg(topic, f"k{i}".encode(), b"v")
                                                 for i in range(40))]
    ids = insert(migrated_url, [messages])
    rule = {"match": ".*", "transform": "tests.integration.transforms_for_tests:hold_marked"}
    config = make_config([topic], relay={"batch_size": 10, "topic_rules": [rule]})
    log_path = tmp_path / "relay.log"
    budget = HOLD_S - 15
    proc = spark_submit(write_profile(config, tmp_path / "relay.toml"), "--available-now",
                        "--time-budget-s", f"{budget:g}", log=log_path,
                        env={"PYSPARK_PYTHON": _late_python(tmp_path)})
    try:
        code = proc.wait(timeout=300)
    finally:
        kill_group(proc)
    log = log_path.read_text(errors="replace")
    left = {row[0] for row in query(migrated_url, "SELECT id FROM kafka_messages")}
    got = consume(stack.kafka_bootstrap, [topic], expect=len(ids) - len(left), timeout_s=30)
    print(f"exit {code}; {len(ids) - len(left)} of {len(ids)} rows left the outbox")

    assert "to connect back" in log, log[-4000:]  # the start timed out (starting.py)
    assert "did not start before the stop" in log, log[-4000:]
    assert code == ExitCode.LEFT_OVER, log[-4000:]
    assert f"left over: topic {topic}: not drained (the time budget of {budget:g} s ran out)" in log
    assert query(migrated_url, "SELECT 1 FROM kafka_topic_info WHERE locked_by IS NOT NULL") == []
    assert {r.outbox_id for r in got} == set(ids) - left


def _late_python(tmp_path: Path) -> str:
    """A python whose first streaming-source worker connects back too late."""
    python = tmp_path / "python"
    python.write_text(_LATE_WORKER.format(marker=tmp_path / "made-late", python=sys.executable))
    python.chmod(0o755)
    return str(python)

"""The first seconds of a continuous relay, as a real spark-submit: a failure or a stop
while the runner runs the rounds the query's first batch body will take over (the
"bridge" rounds, outbox_relay.stream.starting) ends everything that started with it.

- A database error in the second bridge round: the query's first body is already waiting
  for its turn. It must not take the turn and run rounds for `relay.micro_batch_s`; the
  run exits within seconds with the error's own code, with no topic lock left held, and
  nothing deleted that Kafka does not hold.
- A stop signal during the first bridge round: no query starts at all (its start would
  only be stopped again, and the group's signal can reach the source's Python worker
  while it starts).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    every_key_shape,
    insert,
    order_report,
    query,
    unique,
    wait_for,
)
from tests.integration.process import kill_group, signal_group, spark_submit, write_profile

pytestmark = pytest.mark.integration

# Measured from the moment the fault fires to the process's exit.
EXIT_WITHIN_S = 10.0
LOCKED = "SELECT topic, locked_by FROM kafka_topic_info WHERE locked_by IS NOT NULL"


@contextmanager
def trickle(url: str, topic: str) -> Iterator[dict[int, Msg]]:
    """Writes every key shape into the outbox, a small transaction every 0.1 s, so that
    every bridge round has work; yields what was written, by id."""
    written: dict[int, Msg] = {}
    done = threading.Event()

    def write() -> None:
        n = 0
        while not done.is_set():
            rows = every_key_shape([topic], 6)
            rows = [Msg(m.topic, m.key, m.value and m.value + b":%d" % n, m.partition_key)
                    for m in rows]
            written.update(zip(insert(url, [rows]), rows, strict=True))
            n += 1
            done.wait(0.1)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        yield written
    finally:
        done.set()
        thread.join(10)


def _wait_exit(proc: object, timeout_s: float) -> int | None:
    import subprocess

    assert isinstance(proc, subprocess.Popen)
    try:
        return int(proc.wait(timeout=timeout_s))
    except subprocess.TimeoutExpired:
        return None


def test_a_database_error_in_the_second_bridge_round_ends_the_run_within_seconds(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, tmp_path: Path,
) -> None:
    topic = unique("bridge-fault")
    create_topics(stack.kafka_bootstrap, {topic: 3})
    # The shipped micro-batch length: a body that took its turn would run that long.
    config = make_config([topic], relay={"micro_batch_s": 300})
    log_path = tmp_path / "relay.log"

    def log() -> str:
        return log_path.read_text(errors="replace")

    proc = spark_submit(write_profile(config, tmp_path / "relay.toml"), "--log-level", "DEBUG",
                        log=log_path,
                        env={"RELAY_FAILPOINTS": "second_bridge_round_db_error"})
    try:
        # Bridge rounds follow a start-up round that found nothing: the trickle starts after.
        assert wait_for(lambda: "start-up round: rounds end" in log(), 240, 0.05), log()[-4000:]
        with trickle(migrated_url, topic) as written:
            assert wait_for(lambda: "failpoint round_db_error" in log(), 120, 0.05), (
                log()[-4000:])
            fired = time.monotonic()
            code = _wait_exit(proc, EXIT_WITHIN_S + 60)
            took = time.monotonic() - fired
    finally:
        kill_group(proc)
    print(f"exit {code} {took:.1f} s after the fault")
    print("\n".join(line for line in log().splitlines()
                    if re.search(r"failpoint|rounds (start|end)|failed|query|ERROR", line)))
    assert code == ExitCode.DATABASE_ERROR, log()[-4000:]
    assert took <= EXIT_WITHIN_S, f"exited {took:.1f} s after the fault"
    assert "micro-batch 0: rounds start" not in log(), "the query's first body ran rounds"
    assert query(migrated_url, LOCKED) == [], "a topic lock outlived the run"
    left = {i for (i,) in query(migrated_url, "SELECT id FROM kafka_messages")}
    gone = set(written) - left
    got = consume(stack.kafka_bootstrap, [topic], expect=len(gone), timeout_s=60)
    assert gone <= {r.outbox_id for r in got}, "deleted but not in Kafka"
    inversions, spread, _ = order_report(written, got)
    assert inversions == 0 and spread == 0


def test_a_stop_during_the_first_bridge_round_starts_no_query(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, tmp_path: Path,
) -> None:
    topic = unique("bridge-stop")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    config = make_config([topic])
    hold = tmp_path / "hold"
    hold.touch()
    log_path = tmp_path / "relay.log"

    def log() -> str:
        return log_path.read_text(errors="replace")

    proc = spark_submit(write_profile(config, tmp_path / "relay.toml"), log=log_path,
                        env={"RELAY_FAILPOINTS": "first_bridge_round",
                             "RELAY_FAILPOINT_HOLD": str(hold)})
    try:
        assert wait_for(lambda: "failpoint first_bridge_round: held" in log(), 240, 0.05), (
            log()[-4000:])
        ids = insert(migrated_url, [every_key_shape([topic], 12)])
        signal_group(proc, signal.SIGTERM)
        assert wait_for(lambda: "stop requested" in log(), 30, 0.05), log()[-4000:]
        hold.unlink()
        code = _wait_exit(proc, 120)
    finally:
        kill_group(proc)
    print(log()[-3000:])
    assert code == ExitCode.OK, log()[-4000:]
    checkpoint = Path(config.relay.checkpoint_path)
    assert not (checkpoint / "metadata").exists(), "the streaming query started"
    assert "starting the streaming query" not in log()
    left = {i for (i,) in query(migrated_url, "SELECT id FROM kafka_messages")}
    assert left == set(ids), "a round ran after the stop"
    assert query(migrated_url, LOCKED) == []

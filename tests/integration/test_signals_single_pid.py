"""A stop signal to the spark-submit pid alone (what Kubernetes, Docker and supervisord
send) stops the relay gracefully under load, on both launch paths and in both modes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import Msg, consume, create_topics, insert, query, unique, wait_for
from tests.integration.process import (
    LAUNCH_PATHS,
    kill_group,
    launch_env,
    spark_submit,
    write_profile,
)

pytestmark = pytest.mark.integration

BACKLOG = 20_000
GRACE_S = 30.0
MODES = {"continuous": (), "available-now": ("--available-now",)}
COUNT = "SELECT count(*) FROM kafka_messages"
LEFT_IDS = "SELECT id FROM kafka_messages"
LOCKS_HELD = "SELECT count(*) FROM kafka_topic_info WHERE locked_by IS NOT NULL"


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("launch", LAUNCH_PATHS)
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_signal_to_the_spark_submit_pid_alone_stops_gracefully(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, tmp_path: Path,
    launch: str, mode: str, sig: signal.Signals,
) -> None:
    topic = unique("single-pid")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    ids = insert(migrated_url, [[Msg(topic, f"k{i % 31}".encode(), f"v{i}".encode())
                                 for i in range(j, j + 1000)] for j in range(0, BACKLOG, 1000)])
    config = make_config([topic], relay={"batch_size": 200, "available_now_deadline_s": 60})
    log = tmp_path / "relay.log"
    proc = spark_submit(write_profile(config, tmp_path / "relay.toml"), *MODES[mode], log=log,
                        env=launch_env(launch, tmp_path))
    try:
        # Rows leaving the outbox: batches are flowing, so a write is in flight or next.
        assert wait_for(lambda: query(migrated_url, COUNT)[0][0] < BACKLOG - 400, 400,
                        interval_s=0.2), log.read_text()[-3000:]
        os.kill(proc.pid, sig)  # that one pid, not its group
        signalled = time.monotonic()
        try:
            code: int | None = proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            code = None
        exited_s = time.monotonic() - signalled
        gone = wait_for(lambda: _group_gone(proc.pid), max(GRACE_S - exited_s, 0.5), 0.2)
    finally:
        kill_group(proc)
    left = [i for (i,) in query(migrated_url, LEFT_IDS)]
    print(f"{launch} {mode} SIG{sig.name[3:]}: exit {code} after {exited_s:.1f} s, "
          f"{len(left)} left")
    assert code is not None, f"still running {GRACE_S:.0f} s after the signal"
    assert gone, f"the process tree outlived the launcher\n{log.read_text()[-3000:]}"
    if mode == "continuous" or not left:
        assert code == ExitCode.OK, log.read_text()[-3000:]
    else:
        assert code == ExitCode.INTERRUPTED, log.read_text()[-3000:]
    assert query(migrated_url, LOCKS_HELD)[0][0] == 0, "a lock was left held"
    got = {r.outbox_id for r in consume(stack.kafka_bootstrap, [topic],
                                         expect=len(ids) - len(left))}
    assert got | set(left) == set(ids), "a message was lost"

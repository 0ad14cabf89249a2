"""A graceful stop by a signal to the whole process group, at the worst moment.

`kill -TERM -PGID`, or Ctrl-C in a terminal (SIGINT to the foreground group), reaches
every process of spark-submit's group. Without Hadoop's native library, Spark's local
checkpoint writes fork a `chmod` helper for each file; a group signal that lands while
one runs kills the helper, the checkpoint write fails, and the streaming query dies:
exit 5 ("the streaming query failed") instead of the graceful stop's 0.
docs/exit-codes.md, "Signals": "SIGTERM or SIGINT stops claiming, lets the write in
flight finish, deletes what was acknowledged and releases the locks", exit 0 in
continuous mode.

The window is a few milliseconds; a slow `chmod` (a wrapper first on the relay's PATH
that sleeps, as on a slow or loaded disk) widens it so the test hits it every time.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from outbox_relay.stack import StackInfo
from tests.faults.conftest import Scenario
from tests.faults.infra import create_topics, outbox_count, outbox_ids, unique, wait_until
from tests.faults.oracle import read_all, verdict
from tests.faults.outbox_writer import Outbox, traffic
from tests.faults.relay_proc import relay_config, relays, start_relay, with_relay

pytestmark = [pytest.mark.faults, pytest.mark.integration]

ATTEMPTS = 1
SLOW_CHMOD = """#!/bin/sh
sleep 0.5
exec /bin/chmod "$@"
"""


def _checkpoint_file_being_written(checkpoint: Path) -> bool:
    for sub in ("offsets", "commits"):
        try:
            if any(e.name.endswith(".tmp") for e in os.scandir(checkpoint / sub)):
                return True
        except FileNotFoundError:
            continue
    return False


@pytest.mark.scenario("9-stop-signal-during-checkpoint-write")
def test_group_sigterm_while_spark_writes_a_checkpoint_file_still_stops_cleanly(
    stack: StackInfo, fault_db: str, tmp_path: Path, scenario: Scenario,
) -> None:
    topics = [unique("stop"), unique("stop")]
    create_topics(stack.kafka_bootstrap, dict.fromkeys(topics, 2))
    outbox = Outbox(fault_db)
    outbox.write(traffic(topics, 4_000, per_tx=100, keys=20, value_bytes=100, seed=9))
    base = relay_config(fault_db, stack.kafka_bootstrap, tmp_path, topics=topics,
                        source_name="fault-stop", relay={"batch_size": 200})
    slow = tmp_path / "slow-bin"
    slow.mkdir()
    (slow / "chmod").write_text(SLOW_CHMOD)
    (slow / "chmod").chmod(0o755)
    env = {"PATH": f"{slow}{os.pathsep}{os.environ.get('PATH', '')}"}
    codes: list[int] = []
    caught: list[bool] = []
    with relays() as procs:
        for attempt in range(ATTEMPTS):
            config = with_relay(base, checkpoint_path=str(tmp_path / f"checkpoint-{attempt}"))
            proc = start_relay(config, tmp_path, f"stop-{attempt}", env=env)
            procs.append(proc)
            before = outbox_count(fault_db)
            wait_until(lambda before=before: outbox_count(fault_db) < before, 600,  # type: ignore[misc]
                       "the relay to be relaying", diagnose=proc.tail)
            checkpoint = Path(config.relay.checkpoint_path)
            deadline = time.monotonic() + 120
            hit = False
            while time.monotonic() < deadline and proc.alive():
                if _checkpoint_file_being_written(checkpoint):
                    proc.signal(signal.SIGTERM)
                    hit = True
                    break
                time.sleep(0.01)
            if not hit:
                proc.signal(signal.SIGTERM)
            caught.append(hit)
            codes.append(proc.wait(300))
    # A graceful stop leaves nothing half done: what left the outbox was delivered once,
    # what is still in it was not sent.
    left = outbox_ids(fault_db)
    v = verdict(outbox, read_all(stack.kafka_bootstrap, topics), expected=outbox.ids() - left)
    scenario.update(
        v.figures(),
        faults_injected=len(codes),
        exit_codes=codes,
        signalled_mid_checkpoint_write=sum(caught),
        notes=f"SIGTERM to the group while Spark wrote a checkpoint file (chmod slowed to "
              f"0.5 s): exit codes {codes}, 0 expected",
    )

    assert codes == [0] * len(codes), (
        f"graceful stops exited {codes}\n" + "\n".join(p.tail(12) for p in procs))
    v.assert_clean(max_duplicates=0)


# The outbox source's Python worker: forked by pyspark.daemon where the session keeps
# Spark's daemon (a profile with Python UDFs), else started as its own module.
SOURCE_WORKERS = (b"pyspark.daemon", b"python_streaming_source_runner")


def _daemon_in_group(pgid: int) -> bool:
    """Whether the outbox source's Python worker runs in the relay's process group: a
    group signal from then on reaches it too."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        # Fields after the command's closing parenthesis: state, ppid, pgrp.
        pgrp = int(stat.rsplit(")", 1)[1].split()[2])
        if pgrp == pgid and any(w in cmdline for w in SOURCE_WORKERS):
            return True
    return False


@pytest.mark.scenario("9-stop-signal-while-the-source-worker-starts")
def test_group_sigterm_while_the_query_starts_its_python_source_still_stops_cleanly(
    stack: StackInfo, fault_db: str, tmp_path: Path, scenario: Scenario,
) -> None:
    """The bench's start/stop: a relay stopped in its first seconds, when its outbox is
    already empty (the start-up round drained it) and the query is planning its first
    micro-batch. The group's SIGTERM reaches pyspark.daemon, which serves the source's
    worker; that planning then fails, with nothing in flight. The bench's start/stop
    exited 5 in 2 runs of 3 that way. This test signals as the daemon appears and did
    not hit the failing window on its own (it passed before the runner knew the daemon's
    error too; tests/unit/test_stop_signal.py pins that error's text): it guards the
    outcome, exit 0 and nothing lost, not the race."""
    topic = unique("stopstart")
    create_topics(stack.kafka_bootstrap, {topic: 1})
    outbox = Outbox(fault_db)
    outbox.write(traffic([topic], 10, per_tx=10, keys=5, value_bytes=100, seed=11))
    codes: list[int] = []
    with relays() as procs:
        for attempt, after_s in enumerate((0.0, 0.3)):
            config = relay_config(fault_db, stack.kafka_bootstrap, tmp_path, topics=[topic],
                                  source_name="fault-stopstart",
                                  relay={"checkpoint_path": str(tmp_path / f"cp-{attempt}")})
            proc = start_relay(config, tmp_path, f"stopstart-{attempt}")
            procs.append(proc)
            wait_until(lambda proc=proc: _daemon_in_group(proc.proc.pid)  # type: ignore[misc]
                       or not proc.alive(), 300, "the source's Python worker to start",
                       diagnose=proc.tail)
            time.sleep(after_s)
            proc.signal(signal.SIGTERM)
            codes.append(proc.wait(300))
            if attempt == 0:
                outbox.write(traffic([topic], 10, per_tx=10, keys=5, value_bytes=100,
                                     seed=12))
    left = outbox_ids(fault_db)
    v = verdict(outbox, read_all(stack.kafka_bootstrap, [topic]), expected=outbox.ids() - left)
    scenario.update(v.figures(), faults_injected=len(codes), exit_codes=codes,
                    notes="SIGTERM to the group as the source's Python worker started: "
                          f"exit codes {codes}, 0 expected")
    assert codes == [0] * len(codes), (
        f"graceful stops exited {codes}\n" + "\n".join(p.tail(12) for p in procs))
    v.assert_clean(max_duplicates=0)

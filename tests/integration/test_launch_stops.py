"""A stop at any moment of a launch ends it with the mode's stop code, never 143.

On first use spark-submit's JVM lacks the relay's jars, so its Python becomes a launcher
of a second spark-submit that has them (outbox_relay.launch.launcher). A supervisor signals the
first one's pid only; the launcher forwards. A TERM forwarded while the second JVM was
still starting, before its Python driver had its handlers, killed it, and the launcher
reported 143, which no table of the relay's exit codes holds (docs/exit-codes.md).

Here a real first-use launch gets one TERM to its pid at a moment after the launcher
started the driver, from 0.2 s to 10 s, in both modes. The outbox holds rows for a topic
Kafka does not have, so a drain never ends by itself: every exit is the stop's.

On the usual path (spark-defaults.conf brings the jars), the relay's Python takes the
stop signals of spark-submit's JVM as its first step, not once its query runs: from then
on a TERM to the pid is the relay's stop. Before it, spark-submit's shell script and
JVM are starting and none of the relay's code runs (docs/exit-codes.md).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import every_key_shape, insert, query, unique, wait_for
from tests.integration.process import kill_group, launch_env, spark_submit, write_profile

pytestmark = pytest.mark.integration

STARTED_DRIVER = "running it once more with them"
TAKES_SIGNALS = "start-up: stop signals are taken"
# Each mode gets half of the moments, so that together they cover 0.2 s to 10 s.
MOMENTS = {"continuous": (0.2, 1.0, 3.5, 7.5), "available-now": (0.5, 2.0, 5.0, 10.0)}
STOP_CODE = {"continuous": ExitCode.OK, "available-now": ExitCode.INTERRUPTED}
LOCKS_HELD = "SELECT count(*) FROM kafka_topic_info WHERE locked_by IS NOT NULL"


def _stop_at_moments(profile: Path, args: tuple[str, ...], env: dict[str, str], after: str,
                     moments: tuple[float, ...], tmp_path: Path
                     ) -> list[tuple[float, int | None, str]]:
    """For each moment: a launch, one TERM to its pid that long after the log says
    `after`, and (moment, exit code, log)."""
    outcomes: list[tuple[float, int | None, str]] = []
    for moment in moments:
        log = tmp_path / f"relay-{moment}.log"
        proc = spark_submit(profile, *args, "--log-level", "DEBUG", log=log, env=env)
        try:
            assert wait_for(lambda log=log: after in log.read_text(  # type: ignore[misc]
                errors="replace"), 240, 0.02), log.read_text(errors="replace")[-3000:]
            time.sleep(moment)
            os.kill(proc.pid, signal.SIGTERM)  # that one pid, as a supervisor does
            try:
                code: int | None = proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                code = None
        finally:
            kill_group(proc)
        outcomes.append((moment, code, log.read_text(errors="replace")))
        print(f"{' '.join(args) or 'continuous'}: TERM {moment} s after {after!r}: exit {code}")
    return outcomes


def _rounds_after_the_stop(text: str) -> list[str]:
    """The rounds a driver started after it took the stop."""
    stop = text.find("stop requested")
    if stop < 0:
        return []
    return re.findall(r"[^\n]*: rounds start", text[stop:])


@pytest.mark.parametrize("mode", sorted(MOMENTS))
def test_a_stop_at_any_moment_of_a_first_use_launch_exits_with_the_modes_stop_code(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, tmp_path: Path, mode: str,
) -> None:
    topic = unique("never-created")  # Kafka has no such topic: nothing ends a drain
    insert(migrated_url, [every_key_shape([topic], 12)])
    config = make_config([topic], relay={"available_now_deadline_s": 600})
    profile = write_profile(config, tmp_path / "relay.toml")
    args = ("--available-now",) if mode == "available-now" else ()
    outcomes = _stop_at_moments(profile, args, launch_env("first-use", tmp_path),
                                STARTED_DRIVER, MOMENTS[mode], tmp_path)
    for moment, code, text in outcomes:
        assert code == STOP_CODE[mode], f"TERM at {moment} s: exit {code}\n{text[-4000:]}"
        assert not _rounds_after_the_stop(text), f"TERM at {moment} s: a round after it"
    assert query(migrated_url, LOCKS_HELD)[0][0] == 0


def test_a_stop_from_the_relays_first_step_on_exits_with_the_stop_code(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, tmp_path: Path,
) -> None:
    """The usual launch, available-now: TERM to the pid from the moment the relay's Python
    takes the signals, through the session's start (before, its JVM's own handler
    ended spark-submit with 143 until the query ran, 10-20 s after launch)."""
    topic = unique("never-created")
    insert(migrated_url, [every_key_shape([topic], 12)])
    config = make_config([topic], relay={"available_now_deadline_s": 600})
    profile = write_profile(config, tmp_path / "relay.toml")
    outcomes = _stop_at_moments(profile, ("--available-now",), {}, TAKES_SIGNALS,
                                (0.0, 1.0, 4.0), tmp_path)
    for moment, code, text in outcomes:
        assert code == ExitCode.INTERRUPTED, f"TERM at {moment} s: exit {code}\n{text[-4000:]}"
        assert not _rounds_after_the_stop(text), f"TERM at {moment} s: a round after it"

"""The two contenders, started as their users start them, and what their output says.

The relay: `spark-submit jobs/relay.py --config conf/local.toml [--available-now]` from
the checkout, as the README launches it, with only the stack's addresses in its
environment. Its summary line says which lane delivered what (`N by the driver's
producer, M by Spark's executors`). With `debug`, the same command line runs with the
relay's debug log on (RELAY_LOG_LEVEL=DEBUG, RELAY_LOG_FORMAT=json), whose start-up marks
say where the time before the first record went.

The peer: bench/peer.py (Deimos's algorithm) as a process of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.stack import REPO, Stack

RELAY, PEER = "relay", "peer"
DEBUG_ENV = {"RELAY_LOG_LEVEL": "DEBUG", "RELAY_LOG_FORMAT": "json"}
# The relay's debug lines at each step of its start-up (outbox_relay.app and
# outbox_relay.launch.session), by the name the report gives the moment.
MARKS = {
    "python": "start-up: the relay's Python runs",
    "services": "start-up: the services answer",
    "wired": "start-up: the relay is wired",
    "session_building": "start-up: building the Spark session",
    "session_ready": "start-up: the Spark session is ready",
}
_DELIVERED = re.compile(r"^outbox-relay: (\d+) messages delivered in ([\d.]+) s \((\d+) batches\)",
                        re.M)
_LANES = re.compile(r"^outbox-relay: (\d+) by the driver's producer, (\d+) by Spark's executors",
                    re.M)


def relay(stack: Stack, *args: str, log_path: Path, debug: bool = False,
          ) -> subprocess.Popen[bytes]:
    submit = str(Path(sys.executable).parent / "spark-submit")
    env = {**stack.env, **(DEBUG_ENV if debug else {})}
    with log_path.open("wb") as out:
        return subprocess.Popen(
            [submit, "jobs/relay.py", "--config", "conf/local.toml", *args], cwd=REPO,
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def peer(stack: Stack, *args: str, log_path: Path) -> subprocess.Popen[bytes]:
    """The peer; its phase timings go to `log_path` with a .json suffix."""
    with log_path.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "bench.peer", "--url", stack.url, "--bootstrap",
             stack.bootstrap, "--stats", str(log_path.with_suffix(".json")), *args],
            cwd=REPO, env=stack.env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> int:
    """SIGTERM to the process the user started (spark-submit's JVM takes it for the relay:
    a graceful stop, then its summary); the whole group is killed if it does not end."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    return wait(proc, timeout_s)


def wait(proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(30)


def in_repo(path: Path) -> str:
    """A path as the report records it: relative to the checkout, never this machine's."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def relay_output(log_path: Path, launched_at: float) -> dict[str, Any]:
    """What the relay's output says: its summary (messages, batches, lanes; summed over a
    relay of several databases' summaries) and, from a
    debug log, each start-up mark as seconds after `launched_at`."""
    log_text = log_path.read_text(errors="replace")
    out: dict[str, Any] = {"log": in_repo(log_path)}
    # A relay of several databases prints a summary for each: summed.
    if found := _DELIVERED.findall(log_text):
        out["summary"] = {"delivered": sum(int(m[0]) for m in found),
                          "seconds": max(float(m[1]) for m in found),
                          "batches": sum(int(m[2]) for m in found)}
    if found := _LANES.findall(log_text):
        out["lanes"] = {"direct": sum(int(m[0]) for m in found),
                        "spark": sum(int(m[1]) for m in found)}
    marks: dict[str, float] = {}
    for line in log_text.splitlines():
        if not line.startswith("{"):
            continue  # Spark's own lines, the summary
        with contextlib.suppress(ValueError, KeyError, TypeError):
            entry = json.loads(line)
            for name, text in MARKS.items():
                if name not in marks and entry["message"].startswith(text):
                    at = datetime.fromisoformat(entry["time"].replace("Z", "+00:00"))
                    marks[name] = round(at.timestamp() - launched_at, 3)
    if marks:
        out["marks_s"] = marks
    return out


def peer_output(log_path: Path) -> dict[str, Any]:
    """The peer's own timings of its phases (bench/peer.py --stats), when it wrote them."""
    path = log_path.with_suffix(".json")
    if not path.exists():
        return {"log": in_repo(log_path)}
    stats = json.loads(path.read_text())
    return {"log": in_repo(log_path), "batches": stats["batches"],
            "phases_s": {k: round(v, 2) for k, v in stats["seconds"].items()}}

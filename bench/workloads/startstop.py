"""Start-up and stop of the relay (issue 10): launch to first lock, with the packages
already resolved, and SIGTERM to exit while idle.

Each run: a fresh outbox with 10 messages; the relay is launched continuous; start-up
ends at its first topic lock; once the outbox is empty it idles 5 s, then gets a
SIGTERM to its process group, and the stop ends when the process has exited.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.backlog import Backlog, load
from bench.env import BenchEnv, LockWatch, wait_empty
from bench.relay_proc import launch
from outbox_relay.config import Config

IDLE_S = 5.0


def one_run(env: BenchEnv, label: str, config_for: Callable[[str, str], Config]) -> dict[str, Any]:
    url = env.fresh_database(label)
    topic = env.topic_names(label, 1)[0]
    env.create_topics([topic], 1)
    load(url, Backlog(10, (topic,), 10))
    locks = LockWatch(url).start()
    proc = launch(config_for(url, label), env.run_dir(label))
    try:
        deadline = time.monotonic() + 300
        while locks.first_lock_at is None:  # LockWatch itself records the time
            if time.monotonic() > deadline:
                raise RuntimeError("start/stop: no first lock within 300 s")
            time.sleep(0.05)
        wait_empty(url, 120)
        time.sleep(IDLE_S)
        signalled = time.time()
        code = proc.terminate(timeout_s=120)
        stopped = (proc.exited_at or time.time()) - signalled
    finally:
        locks.stop()
        if proc.exited_at is None:
            proc.terminate(timeout_s=30)
    env.drop_database(url)
    env.delete_topics([topic])
    assert locks.first_lock_at is not None
    return {"startup_s": round(locks.first_lock_at - proc.launched_at, 2),
            "stop_s": round(stopped, 2), "exit_code": code}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median with minimum and maximum, as every repeated figure of the report."""
    out: dict[str, Any] = {"runs": runs}
    for key in ("startup_s", "stop_s"):
        values = [r[key] for r in runs]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out

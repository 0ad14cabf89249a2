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
from bench.env import BenchEnv, LockWatch, connect
from bench.relay_proc import launch
from relay.config import Config

IDLE_S = 5.0
COUNT = "SELECT count(*) FROM kafka_messages"


def _wait(what: Callable[[], bool], timeout_s: float, label: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        if time.monotonic() > deadline:
            raise RuntimeError(f"start/stop: {label} not within {timeout_s:.0f} s")
        time.sleep(0.05)


def _empty(url: str) -> bool:
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(COUNT)
            row = cur.fetchone()
            return row is not None and row[0] == 0
    finally:
        conn.close()


def one_run(env: BenchEnv, label: str, config_for: Callable[[str, str], Config]) -> dict[str, Any]:
    url = env.fresh_database(label)
    topic = env.topic_names(label, 1)[0]
    env.create_topics([topic], 1)
    load(url, Backlog(10, (topic,), 10))
    locks = LockWatch(url).start()
    proc = launch(config_for(url, label), env.run_dir(label))
    try:
        _wait(lambda: locks.first_lock_at is not None, 300, "a first lock")
        _wait(lambda: _empty(url), 120, "an empty outbox")
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

"""A benchmark only on a quiet machine (issue 10): contenders share 2 cores with
PostgreSQL and Kafka, so anything else running skews one of them alone.

Before the stack starts: the 1-minute load average must be at most 0.5 and no other
Spark or pytest process may run, and once the stack has started, its broker may hold
few partitions (`check_broker`), unless ``--force``; a forced run is marked as such in
the report. (Still to come, issue 10: the CPU taken during each measured window by
processes outside the contenders and the stack, to re-run a window it spoiled; the load
average cannot tell, since a contender alone loads both cores.)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.probes.cpu import machine_jiffies

MAX_LOAD_TO_START = 0.5
LOAD_GRACE_S = 150.0
# Command-line words of the processes that would compete with the contenders.
_RIVALS = ("pytest", "org.apache.spark.deploy.SparkSubmit", "pyspark.daemon",
           "org.apache.spark.executor")


REFUSAL = "[bench] not a quiet machine, refusing to start (--force overrides): "


class NotQuiet(SystemExit):
    """The machine is busy: the benchmark does not start (``--force`` overrides)."""


def rival_processes(proc: Path = Path("/proc"), own: int | None = None) -> list[str]:
    """`pid: command` of every running pytest or Spark process outside this process tree."""
    own_tree = _tree(proc, own if own is not None else os.getpid())
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in own_tree:
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        line = " ".join(w.decode(errors="replace") for w in words if w)
        if any(rival in line for rival in _RIVALS):
            found.append(f"{entry.name}: {line[:160]}")
    return found


def _tree(proc: Path, root: int) -> set[int]:
    """`root` and its ancestors: the benchmark's own process and whoever started it."""
    tree = {root}
    pid = root
    while pid > 1:
        try:
            stat = (proc / str(pid) / "stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.add(pid)
    return tree


def check_quiet(force: bool) -> dict[str, Any]:
    """The report's record of the start; raises NotQuiet on a busy machine unless forced.
    A load left by what ran just before (`make bench` installs the bench's extra first)
    gets LOAD_GRACE_S to fall: the 1-minute average takes about that long to forget it."""
    rivals = rival_processes()
    deadline = time.monotonic() + (0 if rivals else LOAD_GRACE_S)
    while os.getloadavg()[0] > MAX_LOAD_TO_START and time.monotonic() < deadline:
        time.sleep(5)
    load1 = round(os.getloadavg()[0], 2)
    reasons = []
    if load1 > MAX_LOAD_TO_START:
        reasons.append(f"1-minute load average {load1} > {MAX_LOAD_TO_START}")
    if rivals:
        reasons.append("other Spark or pytest processes run:\n  " + "\n  ".join(rivals))
    if reasons and not force:
        raise NotQuiet(REFUSAL + "; ".join(reasons))
    return {"load1": load1, "rivals": rivals, "forced": bool(reasons) and force,
            "why_forced": reasons if force else []}


# Partitions the stack's broker may hold before a run. A stack that had served a few
# hundred harness runs held 4,771 (1,690 topics): its broker took ten minutes to restart,
# and the next 8-database drain took 46 s instead of 25-28 (docs/performance.md). Every
# part deletes its topics once read back (W3's thousand too), so at a run's start the
# broker holds the demo's and whatever runs that failed or were killed left.
MAX_BROKER_PARTITIONS = 1000


def check_broker(partitions: int, quiet: dict[str, Any], force: bool) -> dict[str, Any]:
    """`quiet` (check_quiet's record) with the broker's partition count; raises NotQuiet
    when the broker holds more than MAX_BROKER_PARTITIONS, unless forced."""
    out = {**quiet, "broker_partitions": partitions}
    if partitions <= MAX_BROKER_PARTITIONS:
        return out
    reason = (f"the broker holds {partitions:,} partitions > {MAX_BROKER_PARTITIONS:,}: "
              f"topics left by other runs (delete them, or start a new stack)")
    if not force:
        raise NotQuiet(REFUSAL + reason)
    return {**out, "forced": True, "why_forced": [*quiet.get("why_forced", []), reason]}


# Before each contender of the default run: the machine's CPU at most this busy over one
# window, and no vacuum running. A drain of a million rows leaves autovacuum busy on the
# table for a minute or more, and a fill leaves the load average high for as long, while
# the next contender's first minute is what is measured.
SETTLED_BUSY, SETTLE_WINDOW_S, SETTLE_MAX_S = 0.25, 5.0, 240.0


def cpu_busy(seconds: float, stat: Path = Path("/proc/stat")) -> float:
    """The share of the machine's CPU time that was busy over the next `seconds`."""
    busy_a, total_a = machine_jiffies(stat)
    time.sleep(seconds)
    busy_b, total_b = machine_jiffies(stat)
    return (busy_b - busy_a) / max(1, total_b - total_a)


def settle(vacuuming: Callable[[], bool]) -> dict[str, float]:
    """Wait (at most SETTLE_MAX_S) until the CPU is settled and nothing vacuums; the
    wait and the last window's busy share go in the report."""
    started = time.monotonic()
    busy = 1.0
    while time.monotonic() - started < SETTLE_MAX_S:
        busy = cpu_busy(SETTLE_WINDOW_S)
        if busy <= SETTLED_BUSY and not vacuuming():
            break
    return {"waited_s": round(time.monotonic() - started, 1), "busy": round(busy, 3)}

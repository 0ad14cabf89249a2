"""CPU taken by processes outside the contenders and the stack, per measured window.

Issue 10 wants a window re-run when something outside the contenders loaded the
machine. The load average cannot tell (a contender alone loads both cores), so a
thread reads /proc/<pid>/stat of every process once a second and sums the CPU of all
that are neither in the bench's own process tree (the contenders are its children,
the load generator and consumer too) nor in the stack's (PostgreSQL's postmaster and
the Kafka broker, found by the stack directory on their command line, and their
children). A process born during the window counts with all of its CPU.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path

from bench.env import stack_dir
from bench.probes.cpu import machine_cpu_s

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / _TICK


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""


def inside(parents: dict[int, int], roots: set[int]) -> set[int]:
    """The roots and every descendant of them, from a pid -> parent map."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [r for r in roots if r in parents]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


class OutsideCpu:
    """Start once for the whole benchmark; ask `cores(t0, t1)` for any past window."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self._interval_s = interval_s
        self._marker = str(stack_dir())
        self._stack_roots: set[int] = set()
        self._last: dict[int, float] = {}
        # (from, to, outside CPU seconds in between, the biggest outside user then)
        self.samples: list[tuple[float, float, float, str]] = []
        # (time, the whole machine's busy CPU seconds so far), for CPU over a drain window
        self.machine: list[tuple[float, float]] = []
        self._at = time.time()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-outside", daemon=True)

    def start(self) -> OutsideCpu:
        self._step(first=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self._interval_s):
            self._step(first=False)

    def _step(self, first: bool) -> None:
        stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(p))}
        parents = {pid: s[0] for pid, s in stats.items()}
        if not self._stack_roots or not all(r in parents for r in self._stack_roots):
            self._stack_roots = {p for p in parents if self._marker in _cmdline(p)}
        ours = inside(parents, {os.getpid(), *self._stack_roots})
        now = {pid: s[1] for pid, s in stats.items() if pid not in ours}
        deltas = {pid: cpu - self._last.get(pid, 0.0) for pid, cpu in now.items()}
        self._last = now
        at, self._at = self._at, time.time()
        self.machine.append((self._at, machine_cpu_s()))
        if first:
            return
        used = sum(d for d in deltas.values() if d > 0)
        top = max(deltas, key=lambda p: deltas[p], default=None)
        # Who it was, for the report of a spoiled window.
        name = f"{_cmdline(top)[:80]} ({deltas[top]:.1f} s)" if top and used > 0.1 else ""
        self.samples.append((at, self._at, used, name))

    def window(self, t0: float, t1: float) -> dict[str, object] | None:
        """Mean cores used outside over [t0, t1] (each sample weighted by its overlap with
        the window) and the biggest outside users; None when no sample overlaps it."""
        used = span = 0.0
        names: dict[str, int] = {}
        for a, b, cpu, name in list(self.samples):
            overlap = min(b, t1) - max(a, t0)
            if overlap <= 0 or b <= a:
                continue
            used += cpu * overlap / (b - a)
            span += overlap
            if name:
                names[name] = names.get(name, 0) + 1
        if span <= 0:
            return None
        top = sorted(names, key=lambda n: -names[n])[:3]
        return {"outside_cores": round(used / span, 3), "seconds": round(span, 1),
                "outside_top": top}

    def machine_cpu(self, t0: float, t1: float) -> float | None:
        """The whole machine's CPU seconds over [t0, t1], interpolated between samples."""
        points = list(self.machine)

        def at(t: float) -> float | None:
            for (a, ca), (b, cb) in itertools.pairwise(points):
                if a <= t <= b:
                    return ca + (cb - ca) * (t - a) / (b - a) if b > a else ca
            return None

        start, end = at(t0), at(t1)
        return None if start is None or end is None else end - start

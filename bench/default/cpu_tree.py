"""CPU seconds of a running process tree over a window inside a run: the relay's driver
JVM, its Python and the Python workers they start (bench/default/run.py's CPU at 500 msg/s and
idle). RUSAGE_CHILDREN (bench/probes/cpu.py) only counts a tree once it has exited."""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stats() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds) of every process."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        out[int(stat.parent.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    return out


class TreeCpu:
    def __init__(self, root: int) -> None:
        self.root = root

    def sample(self) -> dict[int, float]:
        """CPU seconds of each process of the tree now."""
        stats = _stats()
        children: dict[int, list[int]] = {}
        for pid, (parent, _) in stats.items():
            children.setdefault(parent, []).append(pid)
        tree, todo = {}, [self.root]
        while todo:
            pid = todo.pop()
            if pid in stats:
                tree[pid] = stats[pid][1]
            todo += children.get(pid, [])
        return tree

    @staticmethod
    def cores(before: dict[int, float], after: dict[int, float], seconds: float) -> float:
        """Cores used between two samples: what each process used meanwhile (all of it for
        one started meanwhile). A process that ended meanwhile is not counted: an
        undercount of at most its last seconds, never a negative figure."""
        used = sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
        return used / seconds

"""CPU seconds of a contender (issue 10): of its own process tree, and of the whole
machine over the same window (PostgreSQL, Kafka and the bench's own threads included).

The tree's share comes from RUSAGE_CHILDREN: a contender is a child of the bench that
the bench waits for, and every process under it was reaped by its parent, whose
rusage then holds it. The machine's comes from /proc/stat.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (not idle, iowait)


def _children_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_jiffies(stat: Path = Path("/proc/stat")) -> tuple[int, int]:
    """The machine's (busy, total) clock ticks since boot, all CPUs together."""
    with stat.open(encoding="ascii") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return sum(values[i] for i in _BUSY_FIELDS if i < len(values)), sum(values)


def machine_cpu_s() -> float:
    return machine_jiffies()[0] / os.sysconf("SC_CLK_TCK")


@dataclass
class CpuMeter:
    """Start before the contender is launched, stop after it was waited for."""

    _tree0: float = field(default_factory=_children_s)
    _machine0: float = field(default_factory=machine_cpu_s)
    tree_s: float | None = None
    machine_s: float | None = None

    def stop(self) -> CpuMeter:
        self.tree_s = _children_s() - self._tree0
        self.machine_s = machine_cpu_s() - self._machine0
        return self

    def to_json(self, messages: int) -> dict[str, Any]:
        per_k = 1000 / messages if messages else 0.0
        return {
            "cpu_tree_s": round(self.tree_s or 0.0, 2),
            "cpu_machine_s": round(self.machine_s or 0.0, 2),
            "cpu_tree_s_per_1k": round((self.tree_s or 0.0) * per_k, 4),
            "cpu_machine_s_per_1k": round((self.machine_s or 0.0) * per_k, 4),
        }

"""The relay's processes while it runs, read from /proc: the tree under spark-submit (the
driver JVM, the relay's Python, the Python workers they start), each process's CPU
seconds and resident memory, by kind, so that a figure that misses its bound shows
which process spent it. RUSAGE_CHILDREN (bench/probes/cpu.py) counts a tree only once it
has exited: this is for a relay that keeps running."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 1024 / 1024
JVM, DRIVER = "driver JVM", "relay's Python"


@dataclass(frozen=True)
class Proc:
    kind: str
    cpu_s: float
    rss_mb: float


def kind_of(argv: list[str]) -> str:
    """Which of the relay's processes a command line is: the driver JVM, the relay's
    Python, or a Python worker by its module (`python -m pyspark.daemon
    pyspark.sql.worker.plan_data_source_read` is the latter's worker)."""
    if argv and Path(argv[0]).name == "java":
        return JVM
    if any(a.endswith("jobs/relay.py") for a in argv):
        return DRIVER
    if "-m" in argv[:-1]:
        modules = [a for a in argv[argv.index("-m") + 1:] if not a.startswith("-")]
        return f"Python {modules[-1]}"
    return Path(argv[0]).name if argv else "?"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:  # gone meanwhile
        return None


def tree(root: int, proc: Path = Path("/proc")) -> dict[int, Proc]:
    """`root` and every process under it, now."""
    stats: dict[int, list[str]] = {}
    for entry in proc.glob("[0-9]*"):
        text = _read(entry / "stat")
        if text is not None:  # the command name may hold spaces: split after its ')'
            stats[int(entry.name)] = text.rsplit(")", 1)[1].split()
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    out: dict[int, Proc] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        if pid in stats:
            got = stats[pid]
            argv = (_read(proc / str(pid) / "cmdline") or "").split("\0")
            out[pid] = Proc(kind_of([a for a in argv if a]),
                            (int(got[11]) + int(got[12])) / _TICK, int(got[21]) * _PAGE_MB)
    return out


def cpu_between(before: dict[int, Proc], after: dict[int, Proc],
                seconds: float) -> dict[str, Any]:
    """Cores used between two readings, in all and by kind: what each process used
    meanwhile (all of it for one started meanwhile). A process that ended meanwhile is
    not counted: an undercount of at most its last seconds, never a negative figure."""
    by_kind: dict[str, float] = {}
    for pid, p in after.items():
        used = p.cpu_s - (before[pid].cpu_s if pid in before else 0.0)
        by_kind[p.kind] = by_kind.get(p.kind, 0.0) + used / seconds
    return {"cores": round(sum(by_kind.values()), 3),
            "by_kind": {k: round(v, 3) for k, v in sorted(by_kind.items())}}


def rss_of(procs: dict[int, Proc]) -> dict[str, float]:
    by_kind: dict[str, float] = {}
    for p in procs.values():
        by_kind[p.kind] = by_kind.get(p.kind, 0.0) + p.rss_mb
    return {k: round(v) for k, v in sorted(by_kind.items())}


class PeakRss:
    """The largest sum of the tree's resident memory, read every `interval_s`, with its
    split by kind at that moment."""

    def __init__(self, root: int, interval_s: float = 0.5) -> None:
        self.root = root
        self.interval_s = interval_s
        self.peak_mb = 0.0
        self.by_kind: dict[str, float] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)

    def _run(self) -> None:
        while not self._done.wait(self.interval_s):
            procs = tree(self.root)
            total = sum(p.rss_mb for p in procs.values())
            if total > self.peak_mb:
                self.peak_mb, self.by_kind = total, rss_of(procs)

    def start(self) -> PeakRss:
        self._thread.start()
        return self

    def stop(self) -> dict[str, object]:
        self._done.set()
        self._thread.join()
        return {"peak_gb": round(self.peak_mb / 1024, 3), "by_kind_mb": self.by_kind}

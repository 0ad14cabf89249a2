"""W4's heap after a full collection, taken at the same points of progress in both drains.

The liveness log's figure is a maximum over concurrent markings, and objects allocated
during a marking count as live: a 5M drain has about four times the markings of a 1M
drain, so more of them catch a round's transient peak (Spark's execution pages, the
producer's buffers), and the maximum grows with the number of markings, not with what
the driver keeps. This probe asks the driver JVM for a full collection (`jcmd GC.run`,
which G1 runs as a stop-the-world full GC) at each tenth of the drain's progress, the
same nine points whatever the backlog, `SHOTS` times at each. The GC log's
`Pause Full (Diagnostic Command)` lines give the heap each one left: what was reachable
then. The collections cost the drain some speed; W4 measures memory only.

- `heap_full_gc_max_mb`: the largest over all shots, a round's working set included;
- `heap_retained_max_mb`: at each point the smallest of its shots (the heap a round
  leaves once its transient objects are gone), the largest over the points: what the
  driver holds from round to round.
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.env import OffsetWatch

POINTS = tuple(i / 10 for i in range(1, 10))
# Spaced so that a point's shots span a few seconds: a round of a drain lasts seconds,
# and a shot between two rounds sees only what the driver keeps.
SHOTS = 4
GAP_S = 0.5
# jcmd's GC.run logs its cause as "Diagnostic Command"; System.gc() as "System.gc()".
_FORCED = re.compile(
    r"GC\(\d+\) Pause Full \((?:Diagnostic Command|System\.gc\(\))\)\s+\d+M->(\d+)M\(\d+M\)")


def forced_full_gcs(log_files: list[Path]) -> list[int]:
    """The heap (MB) each explicitly requested full collection left, in log order."""
    found: list[int] = []
    for path in log_files:
        found += [int(m[1]) for m in _FORCED.finditer(path.read_text(errors="replace"))]
    return found


def floors(shots: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(point, the lowest heap its shots left), in the order of the points."""
    low: dict[float, float] = {}
    for s in shots:
        low[s["point"]] = min(low.get(s["point"], s["heap_mb"]), s["heap_mb"])
    return sorted(low.items())


@dataclass
class HeapProbe:
    """A thread that watches the drain's progress and asks for the full collections."""

    watch: OffsetWatch
    rows: int
    jvm_pid: Callable[[], int | None]  # the driver JVM's, once it is known
    shots: list[dict[str, float]] = field(default_factory=list)
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> HeapProbe:
        self._thread = threading.Thread(target=self._run, name="bench-heap", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _progress(self) -> int:
        return self.watch.samples[-1][1] if self.watch.samples else 0

    def _run(self) -> None:
        jcmd = shutil.which("jcmd")
        assert jcmd, "jcmd comes with the JDK"
        for point in POINTS:
            while self._progress() < point * self.rows:
                if self._done.wait(0.1):
                    return
            pid = self.jvm_pid()
            for _ in range(SHOTS):
                if pid is None or self._done.is_set():
                    return
                done = subprocess.run([jcmd, str(pid), "GC.run"], capture_output=True,
                                      timeout=120, check=False)
                if done.returncode != 0:  # the JVM has exited: the drain is over
                    return
                self.shots.append({"point": point, "at": time.time(),
                                   "progress": round(self._progress() / self.rows, 3)})
                self._done.wait(GAP_S)

    def summary(self, gc_log: Path | None) -> dict[str, Any]:
        """The probe's figures, its shots matched in order to the GC log's forced
        collections (each `GC.run` returns once its collection is done)."""
        after = forced_full_gcs([gc_log]) if gc_log is not None and gc_log.exists() else []
        shots = [{**s, "heap_mb": float(mb)} for s, mb in zip(self.shots, after, strict=False)]
        lows = [mb for _, mb in floors(shots)]
        every = [s["heap_mb"] for s in shots]
        return {
            "heap_probe": shots,
            "heap_probe_points": len(lows),
            "heap_full_gc_max_mb": max(every, default=None),
            "heap_full_gc_median_mb": statistics.median(every) if every else None,
            "heap_retained_max_mb": max(lows, default=None),
        }

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
  driver holds from round to round;
- `heap_classes`: at each point, after its shots, the largest classes of a class
  histogram (bench.probes.histogram), so that what the retained heap holds can be named;
- `heap_pool`: at DUMP_POINT, the Kafka producer's pooled batches counted in a heap
  dump (bench.probes.hprof), and `heap_besides_pool_mb`, what the dump's collection left
  besides them. The pool is a high-water mark bounded by `buffer.memory`.

The histogram's and the dump's collections are forced full ones too, and count as shots.
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.env import OffsetWatch
from bench.probes import histogram, hprof

POINTS = tuple(i / 10 for i in range(1, 10))
# Spaced so that a point's shots span a few seconds: a round of a drain lasts seconds,
# and a shot between two rounds sees only what the driver keeps.
SHOTS = 4
GAP_S = 0.5
# Where the heap dump names the producer's pooled batches (bench.probes.hprof): late in the
# drain, when the pool is near its high-water mark.
DUMP_POINT = 0.8
# jcmd's GC.run logs its cause as "Diagnostic Command"; System.gc() as "System.gc()".
# A class histogram's and a heap dump's own collections are forced full ones too.
_FORCED = re.compile(
    r"^\[([\d.]+)s\].*GC\(\d+\) Pause Full \((?:Diagnostic Command|System\.gc\(\)"
    r"|Heap Inspection Initiated GC|Heap Dump Initiated GC)\)\s+\d+M->(\d+)M\(\d+M\)", re.M)
# VM.uptime's answer: "12.345 s".
_UPTIME = re.compile(r"^(\d+\.\d+) s$", re.M)


def forced_full_gcs(log_files: list[Path]) -> list[tuple[float, int]]:
    """(JVM uptime s, heap MB it left) of each explicitly requested full collection."""
    found: list[tuple[float, int]] = []
    for path in log_files:
        text = path.read_text(errors="replace")
        found += [(float(m[1]), int(m[2])) for m in _FORCED.finditer(text)]
    return found


def matched(shots: list[dict[str, Any]], gcs: list[tuple[float, int]]) -> list[dict[str, Any]]:
    """Each shot with the heap its collection left: the forced collection logged between
    the JVM uptimes read just before and just after its command. A command can return
    without one (G1 skips a requested full collection while a JNI critical section holds
    the GC locker: lz4's and Arrow's native code do), so shots are not matched by order."""
    out = []
    for shot in shots:
        inside = [mb for at, mb in gcs if shot["from_s"] - 1e-3 <= at <= shot["to_s"] + 1e-3]
        if inside:
            out.append({**shot, "heap_mb": float(inside[-1])})
    return out


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
    histograms: Path | None = None  # where each point's class histogram is written
    pool_array_bytes: int | None = None  # the producer's batch.size
    shots: list[dict[str, Any]] = field(default_factory=list)
    pool: dict[str, Any] | None = None
    classes: dict[str, dict[str, float]] = field(default_factory=dict)
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
            if pid is None or not self._shoot(jcmd, pid, point):
                return

    def _shoot(self, jcmd: str, pid: int, point: float) -> bool:
        """A point's collections, then its histogram (and at DUMP_POINT a heap dump),
        each a full collection of its own; False once the JVM has exited."""
        for _ in range(SHOTS):
            if self._done.is_set() or not self._jcmd(jcmd, pid, point, "GC.run"):
                return False
            self._done.wait(GAP_S)
        if self.histograms is None or self._done.is_set():
            return True
        out = self.histograms / f"classes-{point:.1f}.txt"
        if not self._jcmd(jcmd, pid, point, "GC.class_histogram", out):
            return False
        self.classes[f"{point:.1f}"] = histogram.top(histogram.parse(out.read_text()))
        if point == DUMP_POINT and self.pool_array_bytes:
            dump = self.histograms / f"heap-{point:.1f}.hprof"
            if not self._jcmd(jcmd, pid, point, "GC.heap_dump", None, str(dump)):
                return False
            try:
                arrays = hprof.byte_array_lengths(dump)[self.pool_array_bytes]
            finally:
                dump.unlink(missing_ok=True)  # the size of the heap; the count is kept
            self.pool = {"point": point, "arrays": arrays,
                         "mb": round(arrays * (self.pool_array_bytes + 16) / 2**20, 1)}
        return True

    def _jcmd(self, jcmd: str, pid: int, point: float, command: str,
              out: Path | None = None, *args: str) -> bool:
        """Runs a full-collecting jcmd command between two readings of the JVM's uptime,
        in one attach, and records it as a shot that lasted from one to the other."""
        with tempfile.NamedTemporaryFile("w", suffix=".jcmd") as script:
            script.write(f"VM.uptime\n{' '.join((command, *args))}\nVM.uptime\n")
            script.flush()
            done = subprocess.run([jcmd, str(pid), "-f", script.name], capture_output=True,
                                  text=True, timeout=300, check=False)
        uptimes = [float(u) for u in _UPTIME.findall(done.stdout)]
        if done.returncode != 0 or len(uptimes) != 2:  # the JVM has exited: drain over
            return False
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(done.stdout)
        self.shots.append({"point": point, "at": time.time(), "kind": command,
                           "from_s": uptimes[0], "to_s": uptimes[1],
                           "progress": round(self._progress() / self.rows, 3)})
        return True

    def summary(self, gc_log: Path | None) -> dict[str, Any]:
        """The probe's figures, from its shots matched to the GC log's forced collections;
        `heap_probe_skipped`: the commands the JVM ran without one."""
        gcs = forced_full_gcs([gc_log]) if gc_log is not None and gc_log.exists() else []
        shots = matched(self.shots, gcs)
        lows = [mb for _, mb in floors(shots)]
        every = [s["heap_mb"] for s in shots]
        return {
            "heap_probe": shots,
            "heap_probe_points": len(lows),
            "heap_probe_skipped": len(self.shots) - len(shots),
            "heap_full_gc_max_mb": max(every, default=None),
            "heap_full_gc_median_mb": statistics.median(every) if every else None,
            "heap_retained_max_mb": max(lows, default=None),
            "heap_classes": self.classes,
            **self._pool_figures(shots),
        }

    def _pool_figures(self, shots: list[dict[str, Any]]) -> dict[str, Any]:
        """The producer's pooled batches, and the heap the dump's collection left besides
        them: what the driver keeps apart from that high-water mark."""
        dumped = [s for s in shots if s.get("kind") == "GC.heap_dump"]
        if self.pool is None or not dumped:
            return {"heap_pool": self.pool}
        return {"heap_pool": self.pool,
                "heap_besides_pool_mb": round(dumped[0]["heap_mb"] - self.pool["mb"], 1)}

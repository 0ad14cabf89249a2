"""Process-tree and memory readings from /proc (Linux), and JVM GC-log parsing."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from pathlib import Path


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return None


def parent_of(pid: int) -> int | None:
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    return int(stat.rsplit(")", 1)[1].split()[1])


def cmdline(pid: int) -> list[str]:
    raw = _read(f"/proc/{pid}/cmdline")
    return [a for a in raw.split("\0") if a] if raw else []


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = parent_of(int(entry))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            out.append(child)
            todo.append(child)
    return out


def status_kb(pid: int, field: str) -> int | None:
    """A `VmXXX:` figure of /proc/<pid>/status in KiB (VmHWM is the peak RSS)."""
    text = _read(f"/proc/{pid}/status")
    if text is None:
        return None
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(match[1]) if match else None


def is_python(pid: int) -> bool:
    args = cmdline(pid)
    return bool(args) and "python" in Path(args[0]).name


def is_java(pid: int) -> bool:
    args = cmdline(pid)
    return bool(args) and Path(args[0]).name == "java"


def relay_driver(group_leader: int) -> tuple[int | None, int | None]:
    """(the relay's Python driver, its driver JVM) under a spark-submit process group."""
    tree = [group_leader, *descendants(group_leader)]
    driver = next(
        (p for p in tree if is_python(p) and any(a.endswith("jobs/relay.py") for a in cmdline(p))),
        None,
    )
    jvm = None
    if driver is not None:
        jvm = next((p for p in tree if is_java(p) and parent_of(p) == driver), None)
    if jvm is None and is_java(group_leader):
        jvm = group_leader
    return driver, jvm


def signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    signal_group(proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


# [12.345s][info][gc] GC(7) Pause Young (Normal) (G1 Evacuation Pause) 301M->88M(2048M) 9.1ms
# The kind may hold digits ("G1 Evacuation Pause"): a kind of non-digits matched only
# Remark and Cleanup, and W4's "heap after GC" was theirs alone.
_GC_LINE = re.compile(r"GC\(\d+\) (Pause .*?)\s+(\d+)M->(\d+)M\((\d+)M\)")
# -Xlog:gc+liveness=trace, after each concurrent marking:
# ... GC(8) ### PHASE Post-Marking @ 0.784
# ... GC(8) ### SUMMARY  capacity: 2048.00 MB  used: 85.93 MB / 4.20 %  prev-live: ...
#     next-live: 82.52 MB / 4.03 %  remset: ...
_PHASE = re.compile(r"### PHASE (\S+)")
_NEXT_LIVE = re.compile(r"### SUMMARY .*next-live: ([\d.]+) MB")
# Pauses that copy live objects out, so what they leave is what survived them. Remark
# and Cleanup free nothing by copying: their "after" is the heap as it stood.
_EVACUATING = ("Young", "Mixed", "Full")


def gc_summary(log_files: list[Path]) -> dict[str, float | int | None]:
    """Heap figures of the driver JVM from its -Xlog:gc file(s): the largest heap in use
    before a collection, the largest and the last heap left after one (and after the
    evacuating ones alone), the committed heap."""
    before, after, evacuated, committed = [], [], [], []
    kinds = {"young": 0, "full": 0, "other": 0}
    for path in log_files:
        for line in path.read_text(errors="replace").splitlines():
            m = _GC_LINE.search(line)
            if not m:
                continue
            kind = m[1]
            kinds["full" if "Full" in kind else "young" if "Young" in kind else "other"] += 1
            before.append(int(m[2]))
            after.append(int(m[3]))
            committed.append(int(m[4]))
            if any(k in kind for k in _EVACUATING):
                evacuated.append(int(m[3]))
    if not after:
        return {"gcs": 0, "heap_before_gc_max_mb": None, "heap_after_gc_max_mb": None,
                "heap_after_gc_last_mb": None, "heap_after_evacuation_max_mb": None,
                "heap_committed_max_mb": None}
    return {
        "gcs": len(after),
        "full_gcs": kinds["full"],
        "heap_before_gc_max_mb": max(before),
        "heap_after_gc_max_mb": max(after),
        "heap_after_gc_last_mb": after[-1],
        "heap_after_evacuation_max_mb": max(evacuated, default=None),
        "heap_committed_max_mb": max(committed),
    }


def log_segments(log_file: Path) -> list[Path]:
    """A JVM log and the segments it rotated out (`name.0`, `name.1`, ...): the liveness
    log of a 5M drain passes the JVM's default 20 MB, and its early markings were in a
    segment the bench did not read (the run at 86ed92d reported 438 MB of 736)."""
    rotated = [p for p in log_file.parent.glob(f"{log_file.name}.*") if p.suffix[1:].isdigit()]
    return [*rotated, *([log_file] if log_file.exists() else [])]


def live_summary(log_file: Path) -> dict[str, float | int | None]:
    """The driver JVM's live set from its -Xlog:gc+liveness file: what each concurrent
    marking found reachable (objects allocated during the marking count as live), the
    largest over the run. None when no marking ran."""
    live: list[float] = []
    for segment in log_segments(log_file):
        phase = ""
        for line in segment.read_text(errors="replace").splitlines():
            if m := _PHASE.search(line):
                phase = m[1]
            elif phase == "Post-Marking" and (m := _NEXT_LIVE.search(line)):
                live.append(float(m[1]))
    return {"markings": len(live),
            "heap_live_max_mb": round(max(live), 1) if live else None}

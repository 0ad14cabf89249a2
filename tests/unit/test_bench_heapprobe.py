"""W4's heap probe: a full collection asked of a real JVM with `jcmd GC.run`, read back
from that JVM's GC log; and the probe's figures from its shots. No Spark, no stack."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bench.heapprobe import HeapProbe, forced_full_gcs

# Holds 48 MB reachable (in 64 KB arrays: G1 would give a 1 MB array two whole regions)
# and makes garbage; waits until its stdin closes. A full collection leaves the 48 MB.
_HOLD = """
import java.util.*;
public class Hold { public static void main(String[] a) throws Exception {
  List<byte[]> keep = new ArrayList<>();
  for (int i = 0; i < 768; i++) keep.add(new byte[64 << 10]);
  for (int i = 0; i < 200_000; i++) { byte[] junk = new byte[1024]; junk[0] = 1; }
  System.out.println("ready " + keep.size());
  System.out.flush();
  System.in.read();
} }
"""


def test_a_requested_full_collection_is_read_from_the_jvm_log(tmp_path: Path) -> None:
    java, javac, jcmd = (shutil.which(t) for t in ("java", "javac", "jcmd"))
    if java is None or javac is None or jcmd is None:
        pytest.skip("no JDK on PATH")
    (tmp_path / "Hold.java").write_text(_HOLD)
    # Compiled apart: the source launcher's compiler would stay reachable in the heap.
    subprocess.run([javac, "-d", str(tmp_path), str(tmp_path / "Hold.java")], check=True,
                   timeout=120)
    log = tmp_path / "gc.log"
    proc = subprocess.Popen([java, "-Xmx256m", "-XX:+UseG1GC", f"-Xlog:gc:file={log}",
                             "-cp", str(tmp_path), "Hold"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("ready")
        for _ in range(2):
            subprocess.run([jcmd, str(proc.pid), "GC.run"], check=True, capture_output=True,
                           timeout=60)
    finally:
        proc.communicate("x\n", timeout=60)
    after = forced_full_gcs([log])
    assert len(after) == 2
    # The 48 MB the program keeps, counted by the JVM, not by the program.
    assert all(48 <= mb <= 64 for mb in after), after


def test_the_retained_figure_is_the_highest_floor_over_the_points(tmp_path: Path) -> None:
    log = tmp_path / "gc.log"
    lines = [
        "[1.0s][info][gc] GC(1) Pause Young (Normal) (G1 Evacuation Pause) 300M->90M(1024M) 9ms",
        *[f"[{2 + i}.0s][info][gc] GC({2 + i}) Pause Full (System.gc()) 500M->{mb}M(1024M) 90ms"
          for i, mb in enumerate((400, 170, 450, 180, 175))],
    ]
    log.write_text("\n".join(lines) + "\n")
    probe = HeapProbe(watch=None, rows=10, jvm_pid=lambda: None)  # type: ignore[arg-type]
    # Three shots at the first point, two at the second; a sixth shot whose JVM exited
    # before its collection has no line and is dropped.
    probe.shots = [{"point": p, "at": 0.0, "progress": p} for p in (.1, .1, .1, .2, .2, .3)]
    found = probe.summary(log)
    assert [s["heap_mb"] for s in found["heap_probe"]] == [400, 170, 450, 180, 175]
    assert found["heap_probe_points"] == 2
    assert found["heap_full_gc_max_mb"] == 450
    assert found["heap_retained_max_mb"] == 175
    assert found["heap_full_gc_median_mb"] == 180
    assert probe.summary(tmp_path / "absent.log")["heap_retained_max_mb"] is None

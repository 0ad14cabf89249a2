"""W4's heap probe: a full collection asked of a real JVM with `jcmd GC.run`, read back
from that JVM's GC log; and the probe's figures from its shots. No Spark, no stack."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.probes.heapprobe import DUMP_POINT, SHOTS, HeapProbe, forced_full_gcs
from bench.probes.histogram import growth, parse
from bench.probes.hprof import HprofError, byte_array_lengths
from bench.workloads.soak import jit_counters

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


@pytest.fixture
def holding_jvm(tmp_path: Path) -> Iterator[tuple[int, Path, str]]:
    """(pid, GC log, jcmd) of a JVM holding 48 MB in 768 arrays of 64 KiB."""
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
        yield proc.pid, log, jcmd
    finally:
        proc.communicate("x\n", timeout=60)


def test_a_requested_full_collection_is_read_from_the_jvm_log(
        holding_jvm: tuple[int, Path, str]) -> None:
    pid, log, jcmd = holding_jvm
    for _ in range(2):
        subprocess.run([jcmd, str(pid), "GC.run"], check=True, capture_output=True, timeout=60)
    after = [mb for _, mb in forced_full_gcs([log])]
    assert len(after) == 2
    # The 48 MB the program keeps, counted by the JVM, not by the program.
    assert all(48 <= mb <= 64 for mb in after), after


def test_a_point_names_the_classes_and_counts_the_pooled_arrays(
        holding_jvm: tuple[int, Path, str], tmp_path: Path) -> None:
    """At the dump's point: the collections, a class histogram and a heap dump, each read
    back from the JVM; the 768 arrays of 64 KiB are found as the "pool"."""
    pid, log, jcmd = holding_jvm
    watch = SimpleNamespace(samples=[(0.0, 8)])
    probe = HeapProbe(watch=watch, rows=10, jvm_pid=lambda: pid,  # type: ignore[arg-type]
                      histograms=tmp_path / "h", pool_array_bytes=64 << 10)
    assert probe._shoot(jcmd, pid, DUMP_POINT)
    kinds = [s["kind"] for s in probe.shots]
    assert kinds == ["GC.run"] * SHOTS + ["GC.class_histogram", "GC.heap_dump"]
    assert probe.pool == {"point": DUMP_POINT, "arrays": 768, "mb": 48.0}
    assert not list((tmp_path / "h").glob("*.hprof"))  # the dump is not kept
    held = probe.classes[f"{DUMP_POINT:.1f}"]
    assert 48 <= held["[B"] <= 56, held
    found = probe.summary(log)
    assert [s["kind"] for s in found["heap_probe"]] == kinds  # each matched to its line
    assert found["heap_probe_skipped"] == 0
    assert all(48 <= s["heap_mb"] <= 64 for s in found["heap_probe"])
    # What the JVM holds besides those arrays: its own few MB, not the 48.
    assert 0 <= found["heap_besides_pool_mb"] < 16


def test_the_soak_reads_the_jit_counters_of_a_real_jvm(
        holding_jvm: tuple[int, Path, str]) -> None:
    pid, _, _ = holding_jvm
    found = jit_counters(pid)
    assert found["jit_compiled"] is not None and found["jit_compiled"] > 0
    assert found["jit_s"] is not None and found["jit_s"] >= 0
    assert jit_counters(None) == {"jit_compiled": None, "jit_s": None}


def test_a_file_that_is_not_a_heap_dump_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x.hprof"
    bad.write_bytes(b"not a dump\0" + bytes(32))
    with pytest.raises(HprofError, match="not an HPROF"):
        byte_array_lengths(bad)


def test_the_classes_that_grew_most_are_named() -> None:
    small = {"[B": 120.0, "java.lang.String": 3.0, "gone": 1.0}
    big = {"[B": 179.0, "java.lang.String": 3.05, "new": 0.5}
    assert growth(small, big, 2) == [("[B", 120.0, 179.0), ("new", 0.0, 0.5)]
    assert growth(small, big) == [("[B", 120.0, 179.0), ("new", 0.0, 0.5)]  # not 0.05 MB
    assert parse("   1:        132827      126171712  [B (java.base@17.0.15)\n"
                 "   2:            10            160  java.lang.String\n") == {
        "[B": 126171712, "java.lang.String": 160}


def test_the_retained_figure_is_the_highest_floor_over_the_points(tmp_path: Path) -> None:
    log = tmp_path / "gc.log"
    lines = [
        "[1.0s][info][gc] GC(1) Pause Young (Normal) (G1 Evacuation Pause) 300M->90M(1024M) 9ms",
        *[f"[{2 + i}.0s][info][gc] GC({2 + i}) Pause Full (System.gc()) 500M->{mb}M(1024M) 90ms"
          for i, mb in enumerate((400, 170, 450, 180, 175))],
    ]
    log.write_text("\n".join(lines) + "\n")
    probe = HeapProbe(watch=None, rows=10, jvm_pid=lambda: None)  # type: ignore[arg-type]

    def shot(point: float, at: float) -> dict[str, float]:
        return {"point": point, "at": 0.0, "progress": point, "from_s": at - 0.1,
                "to_s": at + 0.1}

    # Three shots at the first point, then one the JVM ran without a collection (G1 skips
    # one while the GC locker is held), two at the second point, and a last shot whose JVM
    # exited before its collection. The two without a line are dropped, and the shots
    # after the first of them still get their own collections, not their neighbours'.
    probe.shots = [shot(.1, 2.0), shot(.1, 3.0), shot(.1, 4.0), shot(.2, 4.5),
                   shot(.2, 5.0), shot(.2, 6.0), shot(.3, 8.0)]
    found = probe.summary(log)
    assert [s["heap_mb"] for s in found["heap_probe"]] == [400, 170, 450, 180, 175]
    assert found["heap_probe_skipped"] == 2
    assert found["heap_probe_points"] == 2
    assert found["heap_full_gc_max_mb"] == 450
    assert found["heap_retained_max_mb"] == 175
    assert found["heap_full_gc_median_mb"] == 180
    assert probe.summary(tmp_path / "absent.log")["heap_retained_max_mb"] is None

"""bench.md's W4 section: the driver's memory on a 1M and a 5M backlog."""

from __future__ import annotations

from typing import Any

from bench.probes.heapprobe import floors as heap_floors
from bench.probes.histogram import growth
from bench.report.sections import fmt, num

_HOW = (
    "The same driver heap setting (`--driver-memory {heap}`) for both backlogs. Peak RSS is "
    "VmHWM of the driver's processes. The heap figures come from the driver JVM's GC log. "
    "At each tenth of the drain's progress (the same nine points at both backlogs) the bench "
    "asks the JVM for a full collection (`jcmd GC.run`) a few times, a moment apart "
    "(bench/probes/heapprobe.py). What one leaves is what was reachable then: between two rounds, "
    "what the driver keeps; inside a round, that round's working set too (Spark's execution "
    "pages, the producer's buffers). **Retained** is the lowest at each point, the highest "
    "over the points: the target's figure, since it is what would grow if the driver kept "
    "anything per message. **Full GC, max** is the highest any of them left. The live set "
    "is the largest a concurrent marking found reachable (`-Xlog:gc+liveness`); objects "
    "allocated during a marking count as live, so it is a maximum over a number of "
    "markings that grows with the drain's length. A pause's \"after\" also holds old "
    "garbage that G1 leaves until its next marking. The forced collections cost the "
    "drain some speed, so W4's rates are not comparable with W1's. After its collections, "
    "each point takes a class histogram, and at 80% a heap dump counts the `byte[]` of "
    "exactly the producer's `batch.size`: the Kafka producer's pool of freed batches, kept "
    "for reuse up to `buffer.memory`, so a high-water mark of the batches once open at the "
    "same time (bench/probes/hprof.py). **Besides the pool** is what that dump's collection left "
    "without them."
)


def w4_section(outcomes: list[dict[str, Any]], f: dict[str, Any], heap: str) -> list[str]:
    lines = ["## W4: memory", "", _HOW.format(heap=heap), "",
             "| backlog | msgs/s | driver Python peak RSS MB | driver JVM peak RSS MB | "
             "retained MB (points) | full GC, max MB | live set, max MB (markings) | "
             "heap after evacuating GC, max MB | heap after GC, last MB | GCs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for o in sorted(outcomes, key=lambda o: o["rows"]):
        lines.append(
            f"| {num(o['rows'])} | {num(o['msgs_per_s'])} | {o['driver_peak_rss_mb']} | "
            f"{o['jvm_peak_rss_mb']} | {num(o.get('heap_retained_max_mb'))} "
            f"({num(o.get('heap_probe_points'))}) | {num(o.get('heap_full_gc_max_mb'))} | "
            f"{num(o.get('heap_live_max_mb'))} ({num(o.get('markings'))}) | "
            f"{num(o.get('heap_after_evacuation_max_mb'))} | "
            f"{num(o.get('heap_after_gc_last_mb'))} | {num(o.get('gcs'))} |")
    for o in sorted(outcomes, key=lambda o: o["rows"]):
        floors = heap_floors(o.get("heap_probe") or [])
        if floors:
            lines += ["", f"{num(o['rows'])} rows, retained MB at each point (progress): "
                      + ", ".join(f"{mb:.0f} ({p:.0%})" for p, mb in floors)]
    lines += _pool_lines(outcomes)
    lines += ["", "5M/1M: driver JVM peak RSS "
              f"{fmt(f.get('w4_jvm_rss_ratio'), '{:.3f}')}; heap, the target's figure "
              f"({f.get('w4_heap_rule', 'max after GC')}): "
              f"{fmt(f.get('w4_heap_ratio'), '{:.3f}')}; full GC, max: "
              f"{fmt(f.get('w4_heap_full_gc_ratio'), '{:.3f}')}; besides the producer's pool: "
              f"{fmt(f.get('w4_heap_besides_pool_ratio'), '{:.3f}')}; live set: "
              f"{fmt(f.get('w4_heap_live_ratio'), '{:.3f}')}; after evacuating GCs: "
              f"{fmt(f.get('w4_heap_after_evacuation_ratio'), '{:.3f}')}.", ""]
    return lines


def _pool_lines(outcomes: list[dict[str, Any]]) -> list[str]:
    """The pool and the heap besides it, and the classes that differ most between the
    drains' last histograms."""
    ordered = sorted(outcomes, key=lambda o: o["rows"])
    lines = []
    for o in ordered:
        pool = o.get("heap_pool")
        if pool:
            lines += ["", f"{num(o['rows'])} rows, at {pool['point']:.0%}: the producer's pool "
                      f"{pool['arrays']} batches, {pool['mb']} MB; the heap besides it "
                      f"{num(o.get('heap_besides_pool_mb'))} MB"]
    last = [o.get("heap_classes") or {} for o in ordered]
    if len(last) == 2 and all(last):
        small, big = (h[max(h)] for h in last)
        grown = growth(small, big)
        if grown:
            lines += ["", "Grown most from the smaller drain's last histogram to the larger's "
                      "(MB): " + ", ".join(f"`{c}` {a:.1f} to {b:.1f}" for c, a, b in grown)]
    return lines

"""The figures and targets of one run's results, which the report's pages and plots show.

Every contender's runs are summarised as medians with their minimum and maximum
(bench/repeat.py); the targets are computed on the medians, and each ratio's range on
the runs of each repetition. The hand-written part of the report lives in
reports/bench.notes.md and is appended to bench.md as is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common import (
    FLOOR_PROBE,
    KAFKA_LIMIT,
    PEER,
    PEER_BATCH,
    PG_LIMIT,
    PIPELINE_LIMIT,
    RELAY,
    RELAY_LEDGER_DEFERRED,
    SHAPE_LIMIT,
)
from bench.repeat import by_repetition

REPORTS = Path(__file__).resolve().parents[2] / "reports"
Outcomes = dict[str, list[dict[str, Any]]]


def by_name(outcomes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["contender"]: o for o in outcomes}


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _ceiling(o: dict[str, dict[str, Any]]) -> float | None:
    """The pipeline limit (PostgreSQL and Kafka on the same cores) when measured."""
    if PIPELINE_LIMIT in o:
        return float(o[PIPELINE_LIMIT]["msgs_per_s"])
    if PG_LIMIT in o and KAFKA_LIMIT in o:
        return float(min(o[PG_LIMIT]["msgs_per_s"], o[KAFKA_LIMIT]["msgs_per_s"]))
    return None


def _get(o: dict[str, dict[str, Any]], name: str, key: str) -> Any:
    return o.get(name, {}).get(key)


def _drain_figures(f: dict[str, Any], w: Outcomes, v: str) -> None:
    for key in ("W1", "W3", "W6", "W1H", "W3H"):
        o = by_name(w.get(key, []))
        if v not in o:
            continue
        k = key.lower()
        r = o[v]["msgs_per_s"]
        f[f"{k}_msgs_per_s"] = r
        f[f"{k}_relay_over_peer"] = ratio(r, _get(o, PEER, "msgs_per_s"))
        f[f"{k}_relay_over_peer_batch"] = ratio(r, _get(o, PEER_BATCH, "msgs_per_s"))
        f[f"{k}_peer_capped"] = _get(o, PEER, "capped_at_s") is not None
        f[f"{k}_relay_over_limit"] = ratio(r, _ceiling(o))
        f[f"{k}_end_to_end_over_peer"] = ratio(o[v].get("end_to_end_msgs_per_s"),
                                               _get(o, PEER, "end_to_end_msgs_per_s"))
        f[f"{k}_cpu_machine_per_1k_over_peer"] = ratio(
            o[v].get("cpu_machine_s_per_1k"), _get(o, PEER, "cpu_machine_s_per_1k"))
        f[f"{k}_ms_per_topic"] = o[v].get("ms_per_topic")
    o = by_name(w.get("W1", []))
    if v in o and o[v].get("cpu_machine_ledger_s_per_1k") is not None:
        f["w1_ledger_cpu_machine_s_per_1k"] = o[v]["cpu_machine_ledger_s_per_1k"]
        f["w1_ledger_copy_s"] = o[v].get("ledger_copy_s")
    elif v == RELAY and RELAY_LEDGER_DEFERRED in o and RELAY in o:  # runs before 2026-11-27
        d, r = o[RELAY_LEDGER_DEFERRED], o[RELAY]
        for field in ("cpu_machine_drain_s_per_1k", "cpu_machine_s_per_1k"):
            if r.get(field) is not None and d.get(field) is not None:
                f[f"w1_ledger_{field}"] = r[field] - d[field]
    if SHAPE_LIMIT in o:
        f["w1_shape_over_limit"] = ratio(o[SHAPE_LIMIT]["msgs_per_s"], _ceiling(o))
        f["w1_relay_over_shape"] = ratio(f.get("w1_msgs_per_s"), o[SHAPE_LIMIT]["msgs_per_s"])
    if PG_LIMIT in o:
        f["w1_relay_over_pg_limit"] = ratio(f.get("w1_msgs_per_s"), o[PG_LIMIT]["msgs_per_s"])
    if KAFKA_LIMIT in o:
        f["w1_relay_over_kafka_limit"] = ratio(f.get("w1_msgs_per_s"),
                                               o[KAFKA_LIMIT]["msgs_per_s"])


def _load_figures(f: dict[str, Any], w: Outcomes, v: str) -> None:
    o = by_name(w.get("W2", []))
    if v in o:
        f["w2_latency_s"] = o[v]["latency_s"]
        f["w2_p99_below_peer"] = (o[v]["latency_s"]["p99"] < o[PEER]["latency_s"]["p99"]
                                  if PEER in o else None)
        f["w2_p50_below_peer"] = (o[v]["latency_s"]["p50"] < o[PEER]["latency_s"]["p50"]
                                  if PEER in o else None)
        if FLOOR_PROBE in o:
            f["w2_p50_over_floor"] = ratio(o[v]["latency_s"]["p50"],
                                           o[FLOOR_PROBE]["latency_s"]["p50"])
    o = by_name(w.get("W5", []))
    if v in o:
        f["w5_busy_p99_s"] = o[v]["during_drain_latency_s"]["p99"]
        f["w5_peer_busy_p99_s"] = _get(o, PEER, "during_drain_latency_s")
    o = by_name(w.get("W2C", []))
    if v in o:
        sustained = [p for p in o[v]["points"] if not p["saturated"]
                     and not p.get("generator_short")]
        f["w2c_worst_sustained_p99_s"] = max((p["latency_s"]["p99"] for p in sustained),
                                             default=None)
        f["w2c_highest_sustained"] = o[v].get("highest_sustained_rate")
    o = by_name(w.get("SOAK", []))
    if v in o:
        f["soak_p99_last_over_first"] = o[v]["first_vs_last"]["ratio"]
        f["soak_bounded"] = soak_bounded(o[v].get("samples") or [])


# The soak's series that must stay bounded: the ledger table's files and the queue
# table's size. Files on disk and log entries are reported, not judged: they leave only
# by VACUUM and the log's retention, over days, not within a 20-minute soak.
BOUNDED = ("active_files", "queue_bytes")


def soak_bounded(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Each soak series bounded: its last sample at most twice its first half's median
    (growth without bound doubles over a soak; compaction keeps it flat)."""
    out: dict[str, Any] = {}
    for key in BOUNDED:
        values = [s[key] for s in samples if s.get(key) is not None]
        if len(values) < 2:
            out[key] = None
            continue
        half = sorted(values[: len(values) // 2])
        out[key] = {"first": values[0], "max": max(values), "last": values[-1],
                    "bounded": values[-1] <= 2 * max(1, half[len(half) // 2])}
    return out


def _w4_heap_figures(small: dict[str, Any], big: dict[str, Any]) -> dict[str, Any]:
    """5M/1M of the driver's heap. The target's figure is the heap the driver retains
    from round to round: after a full collection, the lowest at each of the probe's
    points, the highest over them (bench/probes/heapprobe.py). Beside it: the largest a full
    collection left (a round's working set), the live set each concurrent marking found,
    and the heap left after pauses. Runs from before the probe fall back on the live
    set, and runs from before that on the largest "after"."""
    def r(key: str) -> float | None:
        return ratio(big.get(key), small.get(key))

    rules = (("heap_retained_max_mb", "retained between rounds"),
             ("heap_live_max_mb", "live set"), ("heap_after_gc_max_mb", "max after GC"))
    key, rule = next(((k, name) for k, name in rules if r(k) is not None), rules[-1])
    return {"w4_heap_ratio": r(key), "w4_heap_rule": rule,
            "w4_heap_full_gc_ratio": r("heap_full_gc_max_mb"),
            "w4_heap_besides_pool_ratio": r("heap_besides_pool_mb"),
            "w4_heap_live_ratio": r("heap_live_max_mb"),
            "w4_heap_after_gc_ratio": r("heap_after_gc_max_mb"),
            "w4_heap_after_evacuation_ratio": r("heap_after_evacuation_max_mb")}


def figures_of(w: Outcomes) -> dict[str, Any]:
    """The ratios issue 10 asks for, on one view of the outcomes (keyed by the relay's
    contender name, as the targets and earlier reports read them)."""
    out: dict[str, Any] = {}
    for v in (RELAY,):
        f: dict[str, Any] = {}
        _drain_figures(f, w, v)
        _load_figures(f, w, v)
        for o in w.get("STARTSTOP", []):
            if o["contender"] == v:
                f["startup_s"] = o["startup_s"]["median"]
                f["stop_s"] = o["stop_s"]["median"]
        if "W4" in w and v == RELAY:
            rows = sorted(w["W4"], key=lambda o: o["rows"])
            # A drain that did not exit 0 says nothing of its memory: one that ran out of
            # heap ends at the limit whatever the backlog (the copy's OOM, 52).
            if len(rows) == 2 and all(o.get("exit_code") == 0 for o in rows):
                f["w4_jvm_rss_ratio"] = ratio(rows[1]["jvm_peak_rss_mb"],
                                              rows[0]["jvm_peak_rss_mb"])
                f.update(_w4_heap_figures(rows[0], rows[1]))
        if f:
            out[v] = f
    return out


def figures(results: dict[str, Any]) -> dict[str, Any]:
    """Figures on the medians, and for each figure its values per repetition."""
    summary = results["summary"]
    figs = figures_of(summary)
    views = {w: by_repetition(o) for w, o in results["workloads"].items()}
    reps = max((len(v) for v in views.values()), default=1)
    per_rep = [figures_of({w: v[min(i, len(v) - 1)] for w, v in views.items()})
               for i in range(reps)]
    figs["per_repetition"] = per_rep
    return figs


def runs_of(summary: Outcomes, workload: str) -> int | None:
    """The fewest runs of the relay and the peer on a workload (what a target rests on)."""
    o = by_name(summary.get(workload, []))
    runs = [o[c].get("runs", 1) for c in (RELAY, PEER) if c in o]
    return min(runs) if runs else None

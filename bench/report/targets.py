"""Issue 10's targets, each from the medians, with its range over the repetitions and
the number of runs it rests on (fewer than 3 is marked)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.common import RELAY
from bench.repeat import MIN_RUNS

Check = Callable[[Any], bool]


def _scalar(value: Any, fmt: str) -> float | None:
    if isinstance(value, dict):
        value = value.get(fmt)
    return float(value) if isinstance(value, int | float) else None


def targets(figs: dict[str, Any], runs_of: Callable[[str], int | None]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    per_rep = figs.get("per_repetition") or []

    def add(workload: str, name: str, target: str, key: str, ok: Check,
            fmt: str = "{:.2f}") -> None:
        runs = runs_of(workload)
        row: dict[str, Any] = {"figure": name, "target": target, "format": fmt,
                               "workload": workload, "runs": runs,
                               "few_runs": runs is not None and runs < MIN_RUNS}
        for variant in (RELAY,):
            v = figs.get(variant, {}).get(key)
            row[variant] = v
            row[f"{variant} met"] = None if v is None else bool(ok(v))
            values = [s for r in per_rep
                      if (s := _scalar(r.get(variant, {}).get(key), fmt)) is not None]
            row[f"{variant} range"] = [min(values), max(values)] if len(values) > 1 else None
        rows.append(row)

    add("W1", "W1 relay/peer (drain)", ">= 1.5x", "w1_relay_over_peer", lambda v: v >= 1.5,
        "{:.1f}x")
    add("W1", "W1 relay/peer, launch to exit", ">= 1.2x", "w1_end_to_end_over_peer",
        lambda v: v >= 1.2, "{:.1f}x")
    add("W1", "W1 relay/pipeline limit", ">= 0.8", "w1_relay_over_limit", lambda v: v >= 0.8)
    add("W1H", "W1 horizon held, relay/peer", ">= 5x", "w1h_relay_over_peer",
        lambda v: v >= 5, "{:.1f}x")
    add("W2", "W2 p50 (s)", "<= 0.3 s", "w2_latency_s", lambda v: v["p50"] <= 0.3, "p50")
    add("W2", "W2 p99 (s)", "<= 0.6 s", "w2_latency_s", lambda v: v["p99"] <= 0.6, "p99")
    add("W2", "W2 p50 below the peer's", "yes", "w2_p50_below_peer", bool, "{}")
    add("W2", "W2 p99 below the peer's", "yes", "w2_p99_below_peer", bool, "{}")
    add("W2", "W2 p50 relay/floor probe", "<= 1.5x", "w2_p50_over_floor", lambda v: v <= 1.5,
        "{:.2f}x")
    add("W2C", "W2 curve: worst p99 at a sustained rate (s)", "< 1.5 s",
        "w2c_worst_sustained_p99_s", lambda v: v < 1.5, "{:.3f}")
    add("W3", "W3 relay/peer", ">= 1.2x", "w3_relay_over_peer", lambda v: v >= 1.2, "{:.1f}x")
    add("W3H", "W3 horizon held, relay/peer", ">= 1.2x", "w3h_relay_over_peer",
        lambda v: v >= 1.2, "{:.1f}x")
    add("W5", "W5 busy topics' p99 during the drain (s)", "< 1 s", "w5_busy_p99_s",
        lambda v: v < 1.0, "{:.3f}")
    add("W6", "W6 relay/peer (headers, partition_key)", ">= 1.5x", "w6_relay_over_peer",
        lambda v: v >= 1.5, "{:.1f}x")
    add("SOAK", "soak p99, last 5 min / first 5 min", "within 20%",
        "soak_p99_last_over_first", lambda v: abs(v - 1) <= 0.2, "{:.2f}")
    # A series not sampled (a report of an older run) is no evidence of a bound.
    add("SOAK", "soak: ledger table's files and queue table bounded", "bounded",
        "soak_bounded", lambda v: all(x is not None and x["bounded"] for x in v.values()),
        "bounded")
    add("STARTSTOP", "start-up, launch to first lock (s, median)", "<= 10 s", "startup_s",
        lambda v: v <= 10, "{:.1f}")
    add("STARTSTOP", "stop, SIGTERM to exit while idle (s, median)", "<= 5 s", "stop_s",
        lambda v: v <= 5, "{:.1f}")
    add("W1", "W1 CPU per 1k msgs, whole machine, relay/peer", "<= 1.5x",
        "w1_cpu_machine_per_1k_over_peer", lambda v: v <= 1.5, "{:.2f}x")
    add("W4", "W4 driver JVM peak RSS 5M/1M", "<= 1.10", "w4_jvm_rss_ratio",
        lambda v: v <= 1.10)
    add("W4", "W4 driver JVM heap after GC 5M/1M", "<= 1.10", "w4_heap_ratio",
        lambda v: v <= 1.10)
    return rows

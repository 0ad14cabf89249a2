"""Repetition (issue 10): contenders alternate, each figure is a median with its minimum
and maximum, and a window spoiled by CPU from outside the contenders is measured again.

Pure functions only (no Spark, no stack), so the rules are unit-tested.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
# Issue 10: at least 3 runs of every contender; fewer are marked in the report.
MIN_RUNS = 3
# A contender alone loads both cores, so the load average cannot tell a spoiled window;
# the CPU of processes outside the contenders and the stack can. One core-equivalent on
# average is half the machine: the contender then ran on roughly one core instead of two.
SPOIL_CORES = 1.0


def alternate(contenders: Sequence[T], repeat: int,
              runs: Sequence[int | None] | None = None) -> list[tuple[int, T]]:
    """(repetition, contender) in the order run: A B C, A B C, ... so that a slow drift
    of the machine (caches, the stack's own state) is shared by every contender.
    `runs[i]`, when given and not None, caps contender i's runs below `repeat`."""
    caps = [repeat if not runs or i >= len(runs) or runs[i] is None else runs[i]
            for i in range(len(contenders))]
    return [(rep, c) for rep in range(repeat) for i, c in enumerate(contenders)
            if rep < (caps[i] or 0)]


def spoiled(outside_cores: float | None, threshold: float = SPOIL_CORES) -> bool:
    """Whether a window's outside CPU (mean cores) makes it unfit to report."""
    return outside_cores is not None and outside_cores > threshold


def run_measured(run: Callable[[int], T], outside_of: Callable[[T], float | None],
                 reruns: int, threshold: float = SPOIL_CORES) -> tuple[T, list[dict[str, Any]]]:
    """`run(attempt)`, again while its window was spoiled, at most `reruns` more times;
    returns the last run and the record of the discarded ones (why each was re-run)."""
    discarded: list[dict[str, Any]] = []
    while True:
        result = run(len(discarded))
        cores = outside_of(result)
        if not spoiled(cores, threshold) or len(discarded) >= reruns:
            return result, discarded
        discarded.append({"outside_cores": cores, "threshold": threshold,
                          "why": f"outside CPU {cores:.2f} cores > {threshold} on average"})


def spread(values: Sequence[float | None]) -> dict[str, Any] | None:
    """Median, minimum, maximum and count of the values that were measured."""
    got = [float(v) for v in values if v is not None]
    if not got:
        return None
    return {"median": statistics.median(got), "min": min(got), "max": max(got), "n": len(got)}


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _median_of(values: list[Any]) -> Any:
    """The median of numbers, a dict of medians for dicts of numbers (latency_s), else the
    first value (strings, lists: taken from the first run)."""
    first = values[0]
    if all(_numeric(v) for v in values):
        median = statistics.median(values)
        # Integers stay integers when the median is one (counts, exit codes).
        return int(median) if float(median).is_integer() and all(
            isinstance(v, int) for v in values) else round(median, 4)
    if isinstance(first, dict) and all(isinstance(v, dict) for v in values):
        keys = [k for k in first if all(k in v and _numeric(v[k]) for v in values)]
        return {**first, **{k: statistics.median([v[k] for v in values]) for k in keys}}
    return first


def summarize(outcomes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One outcome per contender, in first-run order: every numeric field the median of
    its runs, with `runs` (how many) and `range` ({field: [min, max]}) beside it."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for o in outcomes:
        groups.setdefault(o["contender"], []).append(o)
    out = []
    for name, runs in groups.items():
        merged: dict[str, Any] = {}
        ranges: dict[str, list[float]] = {}
        for key in runs[0]:
            values = [r[key] for r in runs if key in r]
            merged[key] = _median_of(values) if len(values) == len(runs) else runs[0][key]
            if len(values) == len(runs) and all(_numeric(v) for v in values):
                ranges[key] = [min(values), max(values)]
            elif isinstance(merged[key], dict) and len(values) == len(runs):
                for k, v in merged[key].items():
                    inner = [r[key].get(k) for r in runs]
                    if _numeric(v) and all(_numeric(x) for x in inner):
                        ranges[f"{key}.{k}"] = [min(inner), max(inner)]
        codes = [r["exit_code"] for r in runs if "exit_code" in r]
        if codes:  # a code names an outcome: no median, and a failed run is never hidden
            merged["exit_codes"] = codes
            merged["exit_code"] = next((c for c in codes if c != 0), 0)
        merged["contender"] = name
        merged["runs"] = len(runs)
        merged["range"] = ranges
        merged["rerun_windows"] = sum(len(r.get("rerun_because") or []) for r in runs)
        out.append(merged)
    return out


def by_repetition(outcomes: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The outcomes of each repetition (field `rep`; runs without one are in every
    repetition, as limits measured once are), to compute a ratio per repetition."""
    reps = sorted({o["rep"] for o in outcomes if o.get("rep") is not None})
    shared = [o for o in outcomes if o.get("rep") is None]
    return [[o for o in outcomes if o.get("rep") == r] + shared for r in reps] or [shared]

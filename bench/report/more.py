"""bench.md sections of the workloads issue 10 added (W5, W6, soak, W2 curve), the
Kafka limits, the Delta ledger's CPU share and the time plan."""

from __future__ import annotations

from typing import Any

from bench.common import (
    KAFKA_LIMIT,
    KAFKA_LIMIT_JAVA,
    RELAY,
    RELAY_LEDGER_DEFERRED,
    SHAPE_LIMIT,
)
from bench.report.figures import by_name
from bench.report.sections import num
from bench.workloads.limit_runs import KAFKA_LIMIT_CONFLUENT


def more_sections(results: dict[str, Any]) -> list[str]:
    w = results["summary"]
    lines = _plan(results["meta"].get("plan"), results["meta"].get("workload_s"))
    lines += _kafka(w.get("W1", []))
    lines += _shape(w.get("W1", []), results["figures"].get(RELAY, {}))
    lines += _ledger(w.get("W1", []), results["figures"].get(RELAY, {}))
    if "W6" in w:
        lines += ["## W6: 100 B rows with two user headers and a partition_key", "",
                  "| contender | msgs/s (median) | min | max | runs | CPU per 1k msgs, machine |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for o in w["W6"]:
            span = o.get("range", {}).get("msgs_per_s") or [o["msgs_per_s"]] * 2
            lines.append(f"| {o['contender']} | {num(o['msgs_per_s'])} | {num(span[0])} | "
                         f"{num(span[1])} | {o.get('runs', 1)} | "
                         f"{num(o.get('cpu_machine_s_per_1k'), 3)} |")
        lines.append("")
    if "W5" in w:
        window = (
            "The backlog is written in one transaction while the busy topics run. The busy "
            "topics' latency counts for rows created from its commit to its last record in "
            "Kafka (the drain: the target's figure). Beside it: rows created while it was "
            "written (the write on the same cores slows them whoever relays them), and over "
            "the whole span from the write's start."
            if any("write_s" in o for o in w["W5"]) else  # runs before 2026-11-27
            "The busy topics' latency counts for rows created from the start of the "
            "backlog's write (in chunks that commit on their own) to its last record in "
            "Kafka.")
        lines += ["## W5: 100 busy topics while one more drains its backlog", "", window, "",
                  "| contender | busy p50 s | busy p99 s | big topic drain s | drained | "
                  "write s | busy p99 during the write s | busy p99, write and drain s | runs |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for o in w["W5"]:
            lat = o["during_drain_latency_s"]
            write = (o.get("during_write_latency_s") or {}).get("p99")
            span = (o.get("write_and_drain_latency_s") or {}).get("p99")
            lines.append(f"| {o['contender']} | {lat['p50']:.3f} | {lat['p99']:.3f} | "
                         f"{o['seconds']:.1f} | {o.get('big_topic_drained')} | "
                         f"{num(o.get('write_s'), 1)} | {num(write, 3)} | {num(span, 3)} | "
                         f"{o.get('runs', 1)} |")
        lines.append("")
    lines += _soak(w.get("SOAK", []))
    lines += _curve(w.get("W2C", []))
    return lines


def _plan(plan: dict[str, Any] | None, took: dict[str, int] | None) -> list[str]:
    if not plan:
        return []
    runs = ", ".join(f"{k} {v}" for k, v in plan["repeat"].items())
    cuts = "; ".join(plan["cuts"]) or "none"
    return ["## Time plan", "",
            f"Runs per contender: {runs}; the one-delete peer {plan['peer_batch_runs']}; the "
            f"peer's held-horizon cap {plan['peer_held_cap_s'] / 60:.0f} min. Estimated "
            f"{plan['total_s'] / 60:.0f} min of a {plan['budget_s'] / 60:.0f} min budget; "
            f"cuts: {cuts}.", "", *_took(plan, took)]


def _took(plan: dict[str, Any], took: dict[str, int] | None) -> list[str]:
    """Each workload's wall time against its estimate: what the next plan is fitted to."""
    if not took:
        return []
    est = plan["estimate_s"]
    return ["| workload | estimated s | took s |", "| --- | --- | --- |",
            *[f"| {w} | {est.get(w, 'n/a')} | {s} |" for w, s in took.items()], ""]


def _kafka(outcomes: list[dict[str, Any]]) -> list[str]:
    o = by_name(outcomes)
    if KAFKA_LIMIT not in o:
        return []
    c, j = o.get(KAFKA_LIMIT_CONFLUENT, {}), o.get(KAFKA_LIMIT_JAVA, {})
    return ["## Kafka limit", "",
            f"confluent-kafka: {num(c.get('msgs_per_s'))} msg/s; Kafka's Java "
            f"ProducerPerformance (no keys or headers): {num(j.get('msgs_per_s'))} msg/s. The "
            f"limit is the higher, {o[KAFKA_LIMIT].get('higher_of')}.", ""]


def _shape(outcomes: list[dict[str, Any]], f: dict[str, Any]) -> list[str]:
    o = by_name(outcomes)
    if SHAPE_LIMIT not in o:
        return []
    s = o[SHAPE_LIMIT]
    return ["## The shape limit (W1)", "",
            "The whole backlog as one claimed batch, read by the relay's own JDBC read and "
            "written by its own Kafka sink in a fresh Spark session (bench/probes/shape.py): no "
            "claim checks, no locks, no deletes, no ledger, no trigger. First pass (the "
            f"JVM warming up, as in the relay's first round): {num(s.get('cold_s'), 2)} s, "
            f"{num(s.get('msgs_per_s'))} msg/s; second pass over the same rows: "
            f"{num(s.get('warm_s'), 2)} s, {num(s.get('warm_msgs_per_s'))} msg/s. First "
            f"pass against the pipeline limit: {num(f.get('w1_shape_over_limit'), 2)}; the "
            f"relay's drain against the first pass: {num(f.get('w1_relay_over_shape'), 2)}.",
            ""]


def _ledger(outcomes: list[dict[str, Any]], f: dict[str, Any]) -> list[str]:
    o = by_name(outcomes)
    r = o.get(RELAY, {})
    if r.get("cpu_machine_ledger_s_per_1k") is not None:
        return ["## The Delta ledger's CPU share (W1)", "",
                "An available-now drain copies its staged ledger records once, at its end "
                "(`ledger.drain_flush_interval_s`, 600 s, is longer than the drain): from the "
                "last record in Kafka to the relay's log line of its last copy batch landing "
                "in Delta. Whole-machine CPU over that window, PostgreSQL's read of the "
                "staging included, per 1,000 messages: "
                f"{num(r.get('cpu_machine_ledger_s_per_1k'), 4)} s (the drain itself: "
                f"{num(r.get('cpu_machine_drain_s_per_1k'), 4)} s; launch to exit: "
                f"{num(r.get('cpu_machine_s_per_1k'), 4)} s), over "
                f"{num(r.get('ledger_copy_s'), 1)} s of copy; medians of {r.get('runs', 1)} "
                "runs.", ""]
    if RELAY_LEDGER_DEFERRED not in o:  # runs before 2026-11-27 measured it apart
        return []
    d = o[RELAY_LEDGER_DEFERRED]
    return ["## The Delta ledger's CPU share (W1)", "",
            "One more relay run with the ledger's Delta copy deferred past the drain "
            "(`ledger.flush_interval_s` longer than the run). Whole-machine CPU seconds per "
            "1,000 messages over the drain (first lock to last record), relay as configured "
            f"against deferred: {num(r.get('cpu_machine_drain_s_per_1k'), 4)} against "
            f"{num(d.get('cpu_machine_drain_s_per_1k'), 4)}; the ledger's share during the "
            f"drain: {num(f.get('w1_ledger_cpu_machine_drain_s_per_1k'), 4)} s per 1k. "
            "Launch to exit (the deferred run copies at its end): "
            f"{num(r.get('cpu_machine_s_per_1k'), 4)} against "
            f"{num(d.get('cpu_machine_s_per_1k'), 4)}, difference "
            f"{num(f.get('w1_ledger_cpu_machine_s_per_1k'), 4)}. The relay's median is of "
            f"{r.get('runs', 1)} runs, the deferred run is one. Caveat: an available-now "
            "drain copies at its end anyway (`ledger.drain_flush_interval_s`, default "
            "600 s, is longer than W1's drain), so both runs copy at exit and this "
            "difference is mostly the runs' variance; it does not isolate the copy.", ""]


def _soak(outcomes: list[dict[str, Any]]) -> list[str]:
    if not outcomes:
        return []
    o = outcomes[0]
    samples = o.get("samples") or []
    fl = o["first_vs_last"]
    last = samples[-1] if samples else {}
    return ["## Soak", "",
            f"{num(o['rows'])} messages at {num(o.get('achieved_rate'))} msg/s, one run. p99 "
            f"per {o['minute_s']:.0f} s: {o['p99_per_minute']}. First against last: "
            f"{fl['first']} s against {fl['last']} s. Ledger files at the end: "
            f"{last.get('active_files')} in the table (at most "
            f"{max((s.get('active_files') or 0 for s in samples), default=None)}); on disk "
            f"{last.get('parquet_files')} parquet, {last.get('delta_log_entries')} _delta_log "
            f"entries (until VACUUM and the log's retention); queue table "
            f"{num(last.get('queue_bytes'))} bytes (max "
            f"{num(max((s['queue_bytes'] for s in samples), default=None))}), sampled every "
            f"15 s ({len(samples)} samples in bench.json).", *_jit_line(samples, o["minute_s"]),
            ""]


def jit_per_minute(samples: list[dict[str, Any]], minute_s: float) -> list[int]:
    """Methods the driver JVM's JIT compiled in each whole minute of the samples."""
    last: dict[int, int] = {}
    for s in samples:
        if s.get("jit_compiled") is not None:
            last[int(s["t"] // minute_s)] = s["jit_compiled"]
    minutes = sorted(last)
    return [last[m] - last[m - 1] for m in minutes if m - 1 in last]


def _jit_line(samples: list[dict[str, Any]], minute_s: float) -> list[str]:
    compiled = jit_per_minute(samples, minute_s)
    if not compiled:
        return []
    return ["", f"Methods the driver JVM's JIT compiled in each {minute_s:.0f} s after the "
            f"first (`jstat -compiler`): {compiled}. A JVM still compiling is still warming up."]


def _curve(outcomes: list[dict[str, Any]]) -> list[str]:
    if not outcomes:
        return []
    lines = ["## W2 curve", "", "One run per contender; a rate is saturated when the "
             "backlog grows through it or is not gone after it.", "",
             "| contender | rate | achieved | p50 s | p99 s | backlog slope /s | saturated |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for o in outcomes:
        for p in o["points"]:
            lat = p.get("latency_s") or {}
            lines.append(f"| {o['contender']} | {p['rate']} | {num(p['achieved_rate'])} | "
                         f"{lat.get('p50', float('nan')):.3f} | "
                         f"{lat.get('p99', float('nan')):.3f} | {p['backlog_slope']} | "
                         f"{'yes' if p['saturated'] else 'no'} |")
    return [*lines, "", "![W2 curve](bench.w2c.png)", ""]

"""Turns one run's results into reports/bench.json, reports/bench.md and PNG plots.

Every figure is a ratio of two measurements taken in the same run. The hand-written
part of the report (what was tried, rejected designs, proposals) lives in
reports/bench.notes.md and is appended to bench.md as is.
"""

from __future__ import annotations

import json
import math
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
    RELAY_PROPOSED,
)

REPORTS = Path(__file__).resolve().parents[1] / "reports"
NOTES = "bench.notes.md"


def _by_name(outcomes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["contender"]: o for o in outcomes}


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _ceiling(o: dict[str, dict[str, Any]]) -> float:
    """The pipeline limit when measured (PostgreSQL and Kafka on the same cores), else the
    smaller of the two measured alone (reports from before issue 10)."""
    if PIPELINE_LIMIT in o:
        return float(o[PIPELINE_LIMIT]["msgs_per_s"])
    return float(min(o[PG_LIMIT]["msgs_per_s"], o[KAFKA_LIMIT]["msgs_per_s"]))


def figures(results: dict[str, Any]) -> dict[str, Any]:
    """The ratios the issue asks for, for the relay and (if run) the relay with proposals."""
    w = results.get("workloads", {})
    out: dict[str, Any] = {}
    for variant in (RELAY, RELAY_PROPOSED):
        f: dict[str, Any] = {}
        if "W1" in w:
            o = _by_name(w["W1"])
            if variant in o:
                r = o[variant]["msgs_per_s"]
                lim = _ceiling(o)
                f["w1_msgs_per_s"] = r
                f["w1_startup_s"] = o[variant].get("startup_s")
                f["w1_steady_msgs_per_s"] = o[variant].get("steady_msgs_per_s")
                f["w1_relay_over_peer"] = _ratio(r, o[PEER]["msgs_per_s"])
                f["w1_relay_over_peer_batch"] = _ratio(r, o[PEER_BATCH]["msgs_per_s"])
                f["w1_relay_over_limit"] = _ratio(r, lim)
                f["w1_relay_over_pg_limit"] = _ratio(r, o[PG_LIMIT]["msgs_per_s"])
                f["w1_relay_over_kafka_limit"] = _ratio(r, o[KAFKA_LIMIT]["msgs_per_s"])
                f["w1_steady_over_limit"] = _ratio(o[variant].get("steady_msgs_per_s"), lim)
                f["w1_end_to_end_msgs_per_s"] = o[variant].get("end_to_end_msgs_per_s")
                f["w1_end_to_end_over_peer"] = _ratio(
                    o[variant].get("end_to_end_msgs_per_s"), o[PEER].get("end_to_end_msgs_per_s"))
                f["w1_cpu_machine_per_1k_over_peer"] = _ratio(
                    o[variant].get("cpu_machine_s_per_1k"), o[PEER].get("cpu_machine_s_per_1k"))
        if "W2" in w:
            o = _by_name(w["W2"])
            if variant in o:
                f["w2_latency_s"] = o[variant]["latency_s"]
                f["w2_peer_latency_s"] = o[PEER]["latency_s"] if PEER in o else None
                if FLOOR_PROBE in o:
                    f["w2_floor_latency_s"] = o[FLOOR_PROBE]["latency_s"]
                    f["w2_p50_over_floor"] = _ratio(o[variant]["latency_s"]["p50"],
                                                    o[FLOOR_PROBE]["latency_s"]["p50"])
        if "W3" in w:
            o = _by_name(w["W3"])
            if variant in o:
                r = o[variant]["msgs_per_s"]
                lim = _ceiling(o)
                f["w3_msgs_per_s"] = r
                f["w3_relay_over_peer"] = _ratio(r, o[PEER]["msgs_per_s"])
                f["w3_relay_over_peer_batch"] = _ratio(r, o[PEER_BATCH]["msgs_per_s"])
                f["w3_relay_over_limit"] = _ratio(r, lim)
                f["w3_ms_per_topic"] = o[variant].get("ms_per_topic")
                if "w1_msgs_per_s" in f:
                    f["w3_over_w1"] = _ratio(r, f["w1_msgs_per_s"])
                    # What the topics cost beyond the messages, at W1's per-message rate.
                    extra = o[variant]["seconds"] - o[variant]["rows"] / f["w1_msgs_per_s"]
                    f["w3_extra_ms_per_topic"] = 1000 * extra / o[variant]["topics"]
        for held in ("W1H", "W3H"):
            o = _by_name(w.get(held, []))
            if variant in o and PEER in o:
                f[f"{held.lower()}_relay_over_peer"] = _ratio(o[variant]["msgs_per_s"],
                                                              o[PEER]["msgs_per_s"])
                f[f"{held.lower()}_peer_capped"] = o[PEER].get("capped_at_s") is not None
        for o in w.get("STARTSTOP", []):
            if o["contender"] == variant:
                f["startup_s"] = o["startup_s"]["median"]
                f["stop_s"] = o["stop_s"]["median"]
        if "W4" in w and variant == RELAY:
            rows = sorted(w["W4"], key=lambda o: o["rows"])
            if len(rows) == 2:
                f["w4_rss_mb"] = [o["driver_peak_rss_mb"] for o in rows]
                f["w4_rss_ratio"] = _ratio(rows[1]["driver_peak_rss_mb"],
                                           rows[0]["driver_peak_rss_mb"])
                f["w4_heap_after_gc_mb"] = [o.get("heap_after_gc_max_mb") for o in rows]
                f["w4_heap_ratio"] = _ratio(rows[1].get("heap_after_gc_max_mb"),
                                            rows[0].get("heap_after_gc_max_mb"))
        if f:
            out[variant] = f
    return out


def targets(figs: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []

    def value(variant: str, key: str) -> Any:
        return figs.get(variant, {}).get(key)

    def add(name: str, target: str, key: str, ok: Any, fmt: str = "{:.2f}") -> None:
        row: dict[str, Any] = {"figure": name, "target": target}
        for variant in (RELAY, RELAY_PROPOSED):
            v = value(variant, key)
            row[variant] = None if v is None else v
            row[f"{variant} met"] = None if v is None else bool(ok(v))
        row["format"] = fmt
        rows.append(row)

    # Issue 10's targets (those with a figure so far).
    add("W1 relay/peer (drain)", ">= 1.5x", "w1_relay_over_peer", lambda v: v >= 1.5, "{:.1f}x")
    add("W1 relay/peer, launch to exit", ">= 1.2x", "w1_end_to_end_over_peer",
        lambda v: v >= 1.2, "{:.1f}x")
    add("W1 relay/limit", ">= 0.8", "w1_relay_over_limit", lambda v: v >= 0.8)
    add("W1 horizon held, relay/peer", ">= 5x", "w1h_relay_over_peer", lambda v: v >= 5,
        "{:.1f}x")
    add("W2 p99 (s)", "<= 0.6 s", "w2_latency_s", lambda v: v["p99"] <= 0.6, "p99")
    add("W2 p50 (s)", "<= 0.3 s", "w2_latency_s", lambda v: v["p50"] <= 0.3, "p50")
    add("W2 p50 relay/floor probe", "<= 1.5x", "w2_p50_over_floor", lambda v: v <= 1.5,
        "{:.2f}x")
    add("W3 relay/peer", ">= 1.2x", "w3_relay_over_peer", lambda v: v >= 1.2, "{:.1f}x")
    add("W3 horizon held, relay/peer", ">= 1.2x", "w3h_relay_over_peer", lambda v: v >= 1.2,
        "{:.1f}x")
    add("start-up, launch to first lock (s, median)", "<= 10 s", "startup_s",
        lambda v: v <= 10, "{:.1f}")
    add("stop, SIGTERM to exit while idle (s, median)", "<= 5 s", "stop_s", lambda v: v <= 5,
        "{:.1f}")
    add("W4 heap after GC 5M/1M", "<= 1.10", "w4_heap_ratio", lambda v: v <= 1.10)
    add("W1 CPU per 1k msgs, whole machine, relay/peer", "<= 1.5x",
        "w1_cpu_machine_per_1k_over_peer", lambda v: v <= 1.5, "{:.2f}x")
    return rows


def _fmt(value: Any, fmt: str) -> str:
    if value is None:
        return "n/a"
    if fmt in ("p50", "p99", "p95"):
        return f"{value[fmt]:.3f}"
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    return fmt.format(value)


def _n(value: Any, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}"
    return str(value)


def markdown(results: dict[str, Any], plots: list[str]) -> str:
    meta = results["meta"]
    figs = results["figures"]
    w = results["workloads"]
    lines: list[str] = []
    title = "# Benchmark" + (" (QUICK: about a tenth of the data)" if meta["quick"] else "")
    lines += [title, ""]
    if meta["quick"]:
        lines += ["> **Quick run.** Iteration figures on a tenth of the data; the full run "
                  "is `python -m bench run`.", ""]
    if meta.get("forced"):
        why = "; ".join(meta["quiet_check"]["why_forced"]).replace("\n", " ")
        lines += [f"> **Forced run** (`--force`) on a machine that was not quiet: {why}. "
                  "Its figures may favour one contender.", ""]
    lines += [
        f"Run {meta['started']} to {meta['finished']} ({meta['duration_s'] / 60:.0f} min), "
        f"by `python -m bench run{' --quick' if meta['quick'] else ''}`. Machine: "
        f"{meta['machine']['cores']} cores, {meta['machine']['mem_gib']} GiB; load average "
        f"at start {meta['sysload_start']}, at end {meta['sysload_end']}. Relay commit "
        f"`{meta['git']}`{' (with uncommitted changes)' if meta.get('dirty') else ''}. "
        "Every figure below is a ratio of two measurements of this one run.",
        "",
        *_reruns(meta.get("reruns") or []),
        "**relay** is the product as committed. **relay + proposals** is the same relay with "
        "`bench/proposals.py` applied at run time: "
        + _proposal_names(meta.get("proposals")) + ".",
        "",
        "## Targets",
        "",
        "| figure | target | relay | met | relay + proposals | met |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for t in results["targets"]:
        def cell(variant: str, row: dict[str, Any] = t) -> tuple[str, str]:
            met = row.get(f"{variant} met")
            return (_fmt(row.get(variant), row["format"]),
                    "n/a" if met is None else ("yes" if met else "**no**"))
        a, am = cell(RELAY)
        b, bm = cell(RELAY_PROPOSED)
        lines.append(f"| {t['figure']} | {t['target']} | {a} | {am} | {b} | {bm} |")
    lines += ["", "Targets that are missed have their measured reason and next step in the "
              "notes below.", ""]
    for plot in plots:
        lines.append(f"![{plot}]({plot})")
    lines.append("")
    if "W1" in w:
        lines += _drain_table("W1: backlog drain", w["W1"], figs, "w1")
    if "W3" in w:
        lines += _drain_table("W3: many topics", w["W3"], figs, "w3")
    for held, base in (("W1H", "W1"), ("W3H", "W3")):
        if held in w:
            lines += _drain_table(f"{held}: {base} with the horizon held", w[held], figs,
                                  held.lower())
            lines += _horizon_lines(w[held])
    if "W2" in w:
        lines += ["## W2: steady latency", "",
                  f"{_n(w['W2'][0]['rows'])} messages at the generator's rate, in transactions "
                  "of 10, after a warm-up; latency from the row's created_at to the consumer's "
                  "receipt.", "",
                  "| contender | p50 s | p95 s | p99 s | max s | received | missing | "
                  "duplicates | achieved rate | relay batches |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for o in w["W2"]:
            lat = o["latency_s"]
            lines.append(
                f"| {o['contender']} | {lat['p50']:.3f} | {lat['p95']:.3f} | {lat['p99']:.3f} | "
                f"{lat['max']:.3f} | {_n(o.get('received'))} | {_n(o.get('missing'))} | "
                f"{_n(o.get('duplicates'))} | {_n(o.get('achieved_rate'))}/s | "
                f"{_n(o.get('batches'))} |"
            )
        lines.append("")
    for o in w.get("STARTSTOP", []):
        runs = "; ".join(f"{r['startup_s']} s / {r['stop_s']} s (exit {r['exit_code']})"
                         for r in o["runs"])
        lines += ["## Start-up and stop", "",
                  "Launch to first lock (packages already resolved), and SIGTERM to exit "
                  f"after 5 s idle, {len(o['runs'])} runs (start-up / stop): {runs}.", ""]
    if "W4" in w:
        lines += ["## W4: memory", "",
                  "The same driver heap setting (`--driver-memory 2g`) for both backlogs. Peak "
                  "RSS is VmHWM of the driver's Python process; the heap figures come from the "
                  "driver JVM's GC log.", "",
                  "| backlog | msgs/s | driver Python peak RSS MB | driver JVM peak RSS MB | "
                  "heap after GC, max MB | heap after GC, last MB | heap before GC, max MB | "
                  "GCs |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for o in sorted(w["W4"], key=lambda o: o["rows"]):
            lines.append(
                f"| {_n(o['rows'])} | {_n(o['msgs_per_s'])} | {o['driver_peak_rss_mb']} | "
                f"{o['jvm_peak_rss_mb']} | {_n(o.get('heap_after_gc_max_mb'))} | "
                f"{_n(o.get('heap_after_gc_last_mb'))} | {_n(o.get('heap_before_gc_max_mb'))} | "
                f"{_n(o.get('gcs'))} |"
            )
        f = figs.get(RELAY, {})
        lines += ["", f"RSS 5M/1M: {_fmt(f.get('w4_rss_ratio'), '{:.3f}')}; heap after GC "
                  f"5M/1M: {_fmt(f.get('w4_heap_ratio'), '{:.3f}')}.", ""]
    if results.get("profile"):
        lines += _profile_section(results["profile"])
    if results.get("explain"):
        lines += _explain_section(results["explain"])
    if results.get("sql"):
        lines += _sql_section(results["sql"])
    notes = REPORTS / NOTES
    if notes.exists():
        lines += ["", notes.read_text(encoding="utf-8")]
    return "\n".join(lines) + "\n"


def _reruns(reruns: list[dict[str, Any]]) -> list[str]:
    """Workloads measured again after the run: all of their contenders, in the rerun."""
    return [
        f"**Re-measured:** {', '.join(r['workloads'])}, every contender, {r['started']} to "
        f"{r['finished']} (load average {r['sysload_start']} to {r['sysload_end']}, commit "
        f"`{r['git']}`). {r.get('reason') or ''}\n"
        for r in reruns
    ]


def _proposal_names(proposals: Any) -> str:
    names = {"claim": "the one-pass claim for relay/control/claims.py"}
    if not proposals or proposals is True:
        return "not run"
    return "; ".join(names.get(p, p) for p in proposals)


def _drain_table(title: str, outcomes: list[dict[str, Any]], figs: dict[str, Any],
                 key: str) -> list[str]:
    o = _by_name(outcomes)
    relay = o.get(RELAY, {}).get("msgs_per_s")
    first = outcomes[0]
    lines = [f"## {title}", "",
             f"{_n(first['rows'])} messages of 1 KB. **msgs/s** is the drain: from the first "
             "topic lock (the first batch starts) to the last record in Kafka. **Start-up** is "
             "launch to first lock (for the relay: JVM, packages, SparkSession, query start). "
             "**End to end** is launch to exit (start-up, drain, the final ledger copy and "
             "shutdown). Steady is first to last record in Kafka.", "",
             "| contender | msgs/s | drain s | start-up s | end-to-end msgs/s | steady msgs/s "
             "| relay / this | Kafka records | left in outbox | notes |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in outcomes:
        ratio = _ratio(relay, c["msgs_per_s"])
        notes = ""
        if c["contender"] == PG_LIMIT:
            notes = f"read {c['read_s']} s, delete {c['delete_s']} s"
        elif c["contender"] == PIPELINE_LIMIT:
            notes = (f"COPY and produce {c['copy_and_produce_s']} s, flush {c['flush_s']} s, "
                     f"delete {c['delete_s']} s")
        elif "phases_s" in c:
            notes = ", ".join(f"{k} {v} s" for k, v in c["phases_s"].items() if v >= 0.5)
        elif "batches" in c:
            notes = f"{c['batches']} micro-batches, exit {c.get('exit_code')}"
        if "ms_per_topic" in c:
            notes += f"; {c['ms_per_topic']:.1f} ms per topic"
        if "cpu_machine_s_per_1k" in c:
            notes += (f"; CPU per 1k msgs {c['cpu_tree_s_per_1k']:.3f} s own, "
                      f"{c['cpu_machine_s_per_1k']:.3f} s machine")
        lines.append(
            f"| {c['contender']} | {_n(c['msgs_per_s'])} | {c['seconds']:.1f} | "
            f"{_n(c.get('startup_s'), 1)} | {_n(c.get('end_to_end_msgs_per_s'))} | "
            f"{_n(c.get('steady_msgs_per_s'))} | "
            f"{_fmt(ratio, '{:.2f}')} | {_n(c.get('kafka_records'))} | "
            f"{_n(c.get('outbox_left'))} | {notes} |"
        )
    lines.append("")
    return lines


def _horizon_lines(outcomes: list[dict[str, Any]]) -> list[str]:
    """What shows the horizon was held: the holding session's xid from start to end."""
    lines = []
    for c in outcomes:
        h = c.get("horizon") or {}
        ends = [f"{s['when']}: backend_xid {s.get('backend_xid')}, backend_xmin "
                f"{s.get('backend_xmin')}, open {s.get('open_s')} s" for s in h.get("samples", [])]
        capped = f"; capped at {c['capped_at_s']} s" if c.get("capped_at_s") else ""
        lines.append(f"- {c['contender']}: xid {h.get('xid')} held throughout: "
                     f"{h.get('held_throughout')} ({'; '.join(ends)}){capped}")
    return [*lines, ""]


def _profile_section(profile: dict[str, Any]) -> list[str]:
    lines = ["## Where a micro-batch's time goes", "",
             "The relay run in-process with timers around its parts (`bench/profile.py`); "
             "Spark's own durations come from StreamingQueryProgress. Mean milliseconds per "
             "micro-batch.", ""]
    for label, run in profile.items():
        if not run.get("phases"):
            continue
        lines += [f"### {label}", "", run.get("description", ""), ""]
        if run.get("startup"):
            lines += ["Start-up, in-process (no spark-submit, no package resolution): "
                      + "; ".join(f"{k} {_n(v, 2)}" for k, v in run["startup"].items()) + ".",
                      ""]
        lines += ["| part | mean ms | p50 ms | max ms | calls |", "| --- | --- | --- | --- | --- |"]
        for name, s in run["phases"].items():
            lines.append(f"| {name} | {s['mean_ms']:.0f} | {s['p50_ms']:.0f} | "
                         f"{s['max_ms']:.0f} | {s['calls']} |")
        lines.append("")
    return lines


def _explain_section(explain: dict[str, Any]) -> list[str]:
    lines = ["## EXPLAIN ANALYZE of every statement", "",
             explain.get("description", ""), "",
             "| statement | calls | real ms (median) | real ms (max) | EXPLAIN ANALYZE ms "
             "(median) |", "| --- | --- | --- | --- | --- |"]
    for e in explain["statements"]:
        lines.append(f"| {e['statement']} | {e['calls']} | {_n(e['real_ms_median'], 2)} | "
                     f"{_n(e['real_ms_max'], 2)} | {_n(e['explain_ms_median'], 2)} |")
    lines += ["", "The plans themselves (first and slowest of each) are in "
              "`reports/bench.explain.txt`.", ""]
    return lines


def _sql_section(sql: dict[str, Any]) -> list[str]:
    lines = ["## Proposed SQL, measured", "",
             "`bench/sqlexp.py` runs the relay's loop "
             "by hand (lock, claim, the executors' read, finish, release) until the outbox is "
             "empty, once with the current statements and once with the proposed ones, each "
             "on its own copy of the same backlog, every statement under EXPLAIN ANALYZE. "
             "Total milliseconds over all rounds:", "",
             "| shape | variant | rounds | claim ms | read ms | finish ms | wall ms | error |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for shape, data in sql["shapes"].items():
        for v in data["variants"]:
            t = v["total_ms"]
            lines.append(
                f"| {shape} ({data['rows']:,} rows, {data['topics']} topics, limit "
                f"{data['limit']:,}) | {v['variant']} | {len(v['rounds'])} | "
                f"{_n(t.get('claim'))} | {_n(t.get('jdbc read (whole batch)'))} | "
                f"{_n(t.get('finish'))} | {_n(t.get('wall'))} | {v['error'] or ''} |")
    lines += ["", "The proposed statements in full (plans of their first round are in "
              "`reports/bench.explain.txt`):", "", "```sql", "-- CLAIM (proposed)",
              (sql.get("claim") or "n/a").strip(), "```", ""]
    return lines


def explain_text(explain: dict[str, Any]) -> str:
    out: list[str] = []
    for e in explain["statements"]:
        plans = e["plans"]
        chosen = plans[:1] + ([max(plans, key=lambda p: p["execution_ms"] or 0)]
                              if len(plans) > 1 else [])
        for i, p in enumerate(chosen):
            which = "first call" if i == 0 else "slowest call"
            out += [f"===== {e['statement']} ({which}, {p['execution_ms']} ms) =====",
                    p["plan"], ""]
    return "\n".join(out)


def plots(results: dict[str, Any], out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: list[str] = []
    w = results["workloads"]
    quick = " (quick)" if results["meta"]["quick"] else ""

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    ax = axes[0]
    groups = [k for k in ("W1", "W3") if k in w]
    names = [RELAY, RELAY_PROPOSED, PEER, PEER_BATCH, PG_LIMIT, KAFKA_LIMIT, PIPELINE_LIMIT]
    colors = ["#1f77b4", "#6baed6", "#d62728", "#ff9896", "#2ca02c", "#98df8a", "#9467bd"]
    width = 0.12
    for i, (name, color) in enumerate(zip(names, colors, strict=True)):
        xs, ys = [], []
        for g, key in enumerate(groups):
            o = _by_name(w[key]).get(name)
            if o:
                xs.append(g + (i - 3) * width)
                ys.append(o["msgs_per_s"])
        if xs:
            ax.bar(xs, ys, width, label=name, color=color)
    ax.set_xticks(range(len(groups)), [f"{g}: {_by_name(w[g])[RELAY]['rows']:,} msgs"
                                       for g in groups])
    ax.set_yscale("log")
    ax.set_ylabel("messages per second (log)")
    ax.set_title(f"Throughput{quick}")
    ax.legend(fontsize=8)
    ax = axes[1]
    if "W2" in w:
        pts = ["p50", "p95", "p99"]
        contenders = w["W2"]
        width = 0.8 / max(1, len(contenders))
        for i, o in enumerate(contenders):
            ax.bar([j + (i - (len(contenders) - 1) / 2) * width for j in range(3)],
                   [o["latency_s"][p] for p in pts], width, label=o["contender"],
                   color=colors[names.index(o["contender"])] if o["contender"] in names else None)
        ax.set_xticks(range(3), pts)
        ax.axhline(1.0, color="grey", ls="--", lw=0.8)
        ax.axhline(0.3, color="grey", ls=":", lw=0.8)
        ax.set_ylabel("seconds, created_at to consumer")
        ax.set_title(f"W2 latency at {w['W2'][0].get('achieved_rate', 0):.0f} msg/s{quick}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "bench.overview.png", dpi=110)
    plt.close(fig)
    made.append("bench.overview.png")

    if "W1" in w:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for o in w["W1"]:
            if o.get("progress"):
                t, n = zip(*o["progress"], strict=True)
                ax.plot(t, n, label=o["contender"])
        ax.set_xlabel("seconds since start")
        ax.set_ylabel("records in Kafka")
        ax.set_title(f"W1 drain progress{quick}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / "bench.w1-progress.png", dpi=110)
        plt.close(fig)
        made.append("bench.w1-progress.png")

    if "W2" in w:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for o in w["W2"]:
            if o.get("cdf"):
                x, y = zip(*o["cdf"], strict=True)
                ax.plot(x, y, label=o["contender"])
        ax.set_xscale("log")
        ax.set_xlabel("latency, seconds (log)")
        ax.set_ylabel("fraction of messages")
        ax.set_title(f"W2 latency distribution{quick}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / "bench.w2-cdf.png", dpi=110)
        plt.close(fig)
        made.append("bench.w2-cdf.png")

    if "W4" in w:
        rows = sorted(w["W4"], key=lambda o: o["rows"])
        fig, ax = plt.subplots(figsize=(7, 4.5))
        labels = [f"{o['rows']:,}" for o in rows]
        series = [("driver Python peak RSS", "driver_peak_rss_mb"),
                  ("driver JVM peak RSS", "jvm_peak_rss_mb"),
                  ("JVM heap after GC (max)", "heap_after_gc_max_mb")]
        for i, (label, key) in enumerate(series):
            ax.bar([j + (i - 1) * 0.25 for j in range(len(rows))],
                   [o.get(key) or 0 for o in rows], 0.25, label=label)
        ax.set_xticks(range(len(rows)), labels)
        ax.set_xlabel("backlog (messages)")
        ax.set_ylabel("MB")
        ax.set_title(f"W4 memory, same 2 GB driver heap{quick}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / "bench.w4-memory.png", dpi=110)
        plt.close(fig)
        made.append("bench.w4-memory.png")
    return made


def write(results: dict[str, Any], out_dir: Path = REPORTS) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    results["figures"] = figures(results)
    results["targets"] = targets(results["figures"])
    made = plots(results, out_dir)
    (out_dir / "bench.json").write_text(json.dumps(results, indent=1, default=str) + "\n",
                                        encoding="utf-8")
    (out_dir / "bench.md").write_text(markdown(results, made), encoding="utf-8")
    text = explain_text(results["explain"]) if results.get("explain") else ""
    for shape, data in (results.get("sql") or {}).get("shapes", {}).items():
        for v in data["variants"]:
            for statement, plan in v.get("plans", {}).items():
                text += (f"===== SQL proposals, {shape} shape, {v['variant']}: {statement} "
                         f"(first round) =====\n{plan}\n\n")
    if text:
        (out_dir / "bench.explain.txt").write_text(text, encoding="utf-8")

"""bench.md: the targets table and one section per workload, from the medians."""

from __future__ import annotations

from typing import Any

from bench.common import PG_LIMIT, PIPELINE_LIMIT, RELAY, SHAPE_LIMIT
from bench.report.figures import REPORTS, by_name, ratio
from bench.report.more import more_sections
from bench.report.sections import (
    explain_section,
    fmt,
    num,
    profile_section,
    reruns,
    sql_section,
)
from bench.report.w4 import w4_section

NOTES = "bench.notes.md"


def _plain(fmt_: str) -> str:
    return "{:.3f}" if fmt_ in ("p50", "p95", "p99") else fmt_


def _range(o: dict[str, Any], key: str) -> str:
    span = (o.get("range") or {}).get(key)
    return f" ({num(span[0])}-{num(span[1])})" if span and o.get("runs", 1) > 1 else ""


def _reruns_note(o: dict[str, Any]) -> str:
    n = o.get("rerun_windows") or 0
    return f", {n} window(s) re-run (outside CPU)" if n else ""


def markdown(results: dict[str, Any], plots: list[str]) -> str:
    meta = results["meta"]
    figs = results["figures"]
    w = results["summary"]
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
        *reruns(meta.get("reruns") or []),
        "**relay** is the product as committed.",
        "",
        "## Targets",
        "",
        "Each figure is computed on the medians of the contenders' runs; the range beside "
        "it is the figure's minimum and maximum over the repetitions (contenders alternate: "
        "relay, peer, peer one-delete, relay, ...). **runs** is the fewest runs of the "
        "relay and the peer behind it; fewer than 3 is marked *(few runs)*.",
        "",
        "| figure | target | relay (range) | met | runs |",
        "| --- | --- | --- | --- | --- |",
    ]
    for t in results["targets"]:
        def cell(variant: str, row: dict[str, Any] = t) -> tuple[str, str]:
            met = row.get(f"{variant} met")
            text = fmt(row.get(variant), row["format"])
            span = row.get(f"{variant} range")
            if span and row["format"] not in ("bounded", "{}"):
                text += f" ({fmt(span[0], _plain(row['format']))}-" \
                        f"{fmt(span[1], _plain(row['format']))})"
            return text, "n/a" if met is None else ("yes" if met else "**no**")
        a, am = cell(RELAY)
        runs = t.get("runs")
        mark = " *(few runs)*" if t.get("few_runs") else ""
        lines.append(f"| {t['figure']} | {t['target']} | {a} | {am} | "
                     f"{num(runs)}{mark} |")
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
    lines += more_sections(results)
    if "W2" in w:
        lines += ["## W2: steady latency", "",
                  f"{num(w['W2'][0]['rows'])} messages at the generator's rate, in transactions "
                  "of 10, after a warm-up; latency from the row's created_at to the consumer's "
                  "receipt.", "",
                  "| contender | p50 s | p95 s | p99 s | max s | received | missing | "
                  "duplicates | achieved rate | relay batches |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for o in w["W2"]:
            lat = o["latency_s"]
            lines.append(
                f"| {o['contender']} | {lat['p50']:.3f} | {lat['p95']:.3f} | {lat['p99']:.3f} | "
                f"{lat['max']:.3f} | {num(o.get('received'))} | {num(o.get('missing'))} | "
                f"{num(o.get('duplicates'))} | {num(o.get('achieved_rate'))}/s | "
                f"{num(o.get('batches'))} | {o.get('runs', 1)} |"
            )
        lines.append("")
    # The raw outcome: the summary's merge counts runs, and start/stop lists each one.
    for o in results["workloads"].get("STARTSTOP", []):
        runs = "; ".join(f"{r['startup_s']} s / {r['stop_s']} s (exit {r['exit_code']})"
                         for r in o["runs"])
        lines += ["## Start-up and stop", "",
                  "Launch to first lock (packages already resolved), and SIGTERM to exit "
                  f"after 5 s idle, {len(o['runs'])} runs (start-up / stop): {runs}.", ""]
    if "W4" in w:
        # Runs from before the heap setting was recorded had 2g.
        lines += w4_section(w["W4"], figs.get(RELAY, {}), meta.get("driver_memory", "2g"))
    if results.get("profile"):
        lines += profile_section(results["profile"])
    if results.get("explain"):
        lines += explain_section(results["explain"])
    if results.get("sql"):
        lines += sql_section(results["sql"])
    notes = REPORTS / NOTES
    if notes.exists():
        lines += ["", notes.read_text(encoding="utf-8")]
    return "\n".join(lines) + "\n"


def _drain_table(title: str, outcomes: list[dict[str, Any]], figs: dict[str, Any],
                 key: str) -> list[str]:
    o = by_name(outcomes)
    relay = o.get(RELAY, {}).get("msgs_per_s")
    first = outcomes[0]
    lines = [f"## {title}", "",
             f"{num(first['rows'])} messages of 1 KB. **msgs/s** is the drain: from the first "
             "topic lock (the first batch starts) to the last record in Kafka. **Start-up** is "
             "launch to first lock (for the relay: JVM, packages, SparkSession, query start). "
             "**End to end** is launch to exit (start-up, drain, the final ledger copy and "
             "shutdown). Steady is first to last record in Kafka.", "",
             "Medians of the runs, with minimum and maximum of msgs/s.", "",
             "| contender | msgs/s (range) | drain s | start-up s | end-to-end msgs/s | steady "
             "msgs/s | relay / this | Kafka records | left in outbox | runs | notes |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in outcomes:
        over = ratio(relay, c["msgs_per_s"])
        notes = ""
        if c["contender"] == PG_LIMIT:
            notes = f"read {c['read_s']} s, delete {c['delete_s']} s"
        elif c["contender"] == PIPELINE_LIMIT:
            notes = (f"COPY and produce {c['copy_and_produce_s']} s, flush {c['flush_s']} s, "
                     f"delete {c['delete_s']} s")
        elif c["contender"] == SHAPE_LIMIT:
            notes = f"first pass; second pass {c['warm_s']} s"
        elif c.get("capped_at_s"):
            notes = f"capped at {c['capped_at_s']:.0f} s"
        elif "phases_s" in c:
            notes = ", ".join(f"{k} {v} s" for k, v in c["phases_s"].items() if v >= 0.5)
        elif "batches" in c:
            codes = c.get("exit_codes") or [c.get("exit_code")]
            notes = f"{c['batches']} micro-batches, exit {', '.join(map(str, codes))}"
        if "ms_per_topic" in c:
            notes += f"; {c['ms_per_topic']:.1f} ms per topic"
        if "cpu_machine_s_per_1k" in c:
            notes += (f"; CPU per 1k msgs {c['cpu_tree_s_per_1k']:.3f} s own, "
                      f"{c['cpu_machine_s_per_1k']:.3f} s machine")
        lines.append(
            f"| {c['contender']} | {num(c['msgs_per_s'])}{_range(c, 'msgs_per_s')} | "
            f"{c['seconds']:.1f} | "
            f"{num(c.get('startup_s'), 1)} | {num(c.get('end_to_end_msgs_per_s'))} | "
            f"{num(c.get('steady_msgs_per_s'))} | "
            f"{fmt(over, '{:.2f}')} | {num(c.get('kafka_records'))} | "
            f"{num(c.get('outbox_left'))} | {c.get('runs', 1)}{_reruns_note(c)} | {notes} |"
        )
    lines.append("")
    if any(c.get("capped_at_s") for c in outcomes):
        lines += ["A peer run stopped at its cap (notes) is rated by the records Kafka "
                  "received in it (**Kafka records**), over its time: an upper bound of its "
                  "rate, since its walk of the deleted rows' index entries only grows as it "
                  "goes.", ""]
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



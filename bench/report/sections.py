"""The report's sections that show diagnostics rather than targets: profiles, EXPLAIN
plans, the claim's SQL, reruns; and the number formats every section shares."""

from __future__ import annotations

import math
from typing import Any


def fmt(value: Any, fmt: str) -> str:
    if value is None:
        return "n/a"
    if fmt in ("p50", "p99", "p95"):
        return f"{value[fmt]:.3f}"
    if fmt == "bounded":  # the soak's series (bench.report.figures.soak_bounded)
        return "; ".join(
            f"{name} {'not sampled' if v is None else 'bounded' if v['bounded'] else 'grew'}"
            for name, v in value.items())
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    return fmt.format(value)


def num(value: Any, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}"
    return str(value)


def reruns(reruns: list[dict[str, Any]]) -> list[str]:
    """Workloads measured again after the run: all of their contenders, in the rerun."""
    return [
        f"**Re-measured:** {', '.join(r['workloads'])}, every contender, {r['started']} to "
        f"{r['finished']} (load average {r['sysload_start']} to {r['sysload_end']}, commit "
        f"`{r['git']}`). {r.get('reason') or ''}\n"
        for r in reruns
    ]


def profile_section(profile: dict[str, Any]) -> list[str]:
    lines = ["## Where a micro-batch's time goes", "",
             "The relay run in-process with timers around its parts (`bench/probes/profile.py`); "
             "Spark's own durations come from StreamingQueryProgress. Mean milliseconds per "
             "micro-batch.", ""]
    for label, run in profile.items():
        if not run.get("phases"):
            continue
        lines += [f"### {label}", "", run.get("description", ""), ""]
        if run.get("startup"):
            lines += ["Start-up, in-process (no spark-submit, no package resolution): "
                      + "; ".join(f"{k} {num(v, 2)}" for k, v in run["startup"].items()) + ".",
                      ""]
        lines += ["| part | mean ms | p50 ms | max ms | calls |", "| --- | --- | --- | --- | --- |"]
        for name, s in run["phases"].items():
            lines.append(f"| {name} | {s['mean_ms']:.0f} | {s['p50_ms']:.0f} | "
                         f"{s['max_ms']:.0f} | {s['calls']} |")
        lines.append("")
    return lines


def explain_section(explain: dict[str, Any]) -> list[str]:
    lines = ["## EXPLAIN ANALYZE of every statement", "",
             explain.get("description", ""), "",
             "| statement | calls | real ms (median) | real ms (max) | EXPLAIN ANALYZE ms "
             "(median) |", "| --- | --- | --- | --- | --- |"]
    for e in explain["statements"]:
        lines.append(f"| {e['statement']} | {e['calls']} | {num(e['real_ms_median'], 2)} | "
                     f"{num(e['real_ms_max'], 2)} | {num(e['explain_ms_median'], 2)} |")
    lines += ["", "The plans themselves (first and slowest of each) are in "
              "`reports/bench.explain.txt`.", ""]
    return lines


def sql_section(sql: dict[str, Any]) -> list[str]:
    lines = ["## The claim's SQL, measured", "",
             "`bench/probes/sqlexp.py` runs the relay's loop "
             "by hand (lock, claim, the executors' read, finish, release) until the outbox is "
             "empty, with the relay's own statements (once with the server's work_mem, once "
             "with 64MB), each on its own copy of the same backlog, every statement under "
             "EXPLAIN ANALYZE. "
             "Total milliseconds over all rounds:", "",
             "| shape | variant | rounds | claim ms | read ms | finish ms | wall ms | error |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for shape, data in sql["shapes"].items():
        for v in data["variants"]:
            t = v["total_ms"]
            lines.append(
                f"| {shape} ({data['rows']:,} rows, {data['topics']} topics, limit "
                f"{data['limit']:,}) | {v['variant']} | {len(v['rounds'])} | "
                f"{num(t.get('claim'))} | {num(t.get('jdbc read (whole batch)'))} | "
                f"{num(t.get('finish'))} | {num(t.get('wall'))} | {v['error'] or ''} |")
    lines += ["", "The plans of each variant's first round are in "
              "`reports/bench.explain.txt`.", ""]
    if sql.get("claim"):  # a report from before 2026-12: the proposed claim it measured
        lines += ["The proposed claim that run measured:", "", "```sql",
                  sql["claim"].strip(), "```", ""]
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

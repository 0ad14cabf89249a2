"""Writes one run's results as reports/bench.json, reports/bench.md, the plots and
reports/bench.explain.txt. The hand-written part of the report lives in
reports/bench.notes.md and is appended to bench.md as is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.repeat import summarize
from bench.report.figures import REPORTS, figures, runs_of
from bench.report.md import markdown
from bench.report.plots import plots
from bench.report.sections import explain_text
from bench.report.targets import targets


def write(results: dict[str, Any], out_dir: Path = REPORTS) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    results["summary"] = {w: summarize(o) for w, o in results["workloads"].items()}
    results["figures"] = figures(results)
    results["targets"] = targets(results["figures"], lambda w: runs_of(results["summary"], w))
    made = plots(results, out_dir)
    (out_dir / "bench.json").write_text(json.dumps(results, indent=1, default=str) + "\n",
                                        encoding="utf-8")
    (out_dir / "bench.md").write_text(markdown(results, made), encoding="utf-8")
    text = explain_text(results["explain"]) if results.get("explain") else ""
    for shape, data in (results.get("sql") or {}).get("shapes", {}).items():
        for v in data["variants"]:
            for statement, plan in v.get("plans", {}).items():
                text += (f"===== claim SQL, {shape} shape, {v['variant']}: {statement} "
                         f"(first round) =====\n{plan}\n\n")
    if text:
        (out_dir / "bench.explain.txt").write_text(text, encoding="utf-8")

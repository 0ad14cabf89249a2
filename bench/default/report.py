"""`make bench`: the default run (bench/default/run.py plus W3 and W5), its targets and report.

Writes reports/bench-default.json and reports/bench-default.md. The full suite (the
soak, W4 and the rest) is `python -m bench run --full`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import outbox_relay.stack
from bench.common import REPO, log, sys_load
from bench.default.latency import LAT_WINDOW_S, latency_run
from bench.default.run import Stack, first_message, w1
from bench.probes.quiet import check_quiet
from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import migrate

PARTS = ("W1", "LAT", "FIRST", "W3", "W5")
WORK = REPO / ".relay-data" / "bench-default"

# (target, figure path, bound, higher is better)
TARGETS: list[tuple[str, tuple[str, ...], float, bool]] = [
    ("W1 drain, relay / peer", ("W1", "drain_ratio"), 2.0, True),
    ("W1 launch to exit, relay / peer", ("W1", "exit_ratio"), 1.5, True),
    ("1,000 msg/s, first minute p99 (s)", ("LAT1000", "first_minute", "p99_s"), 1.0, False),
    ("1,000 msg/s, steady p50 (s)", ("LAT1000", "steady", "p50_s"), 0.25, False),
    ("1,000 msg/s, steady p99 (s)", ("LAT1000", "steady", "p99_s"), 0.5, False),
    ("500 msg/s, relay CPU (cores)", ("LAT500", "cpu_cores"), 0.5, False),
    ("idle CPU (cores)", ("LAT500", "idle_cores"), 0.05, False),
    ("launch to first message (s)", ("FIRST", "launch_to_first_s"), 10.0, False),
    ("W3, relay / peer", ("W3", "ratio"), 1.0, True),
]


def _dig(results: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = results
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name, path, bound, higher in TARGETS:
        figure = _dig(results, path)
        met = None if figure is None else (figure >= bound if higher else figure <= bound)
        rows.append({"target": name, "bound": f"{'>=' if higher else '<='} {bound:g}",
                     "figure": figure, "met": met})
    return rows


def _now() -> str:
    return dt.datetime.now().isoformat(timespec="seconds")


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = ["# Benchmark, default run (shipped profile, conf/local.toml)", "",
             f"Started {meta['started']}, ended {meta.get('ended', '?')}, git {meta['git']}; "
             "load average at the start "
             f"{results['load_start']}, at the end {results['load_end']}.", "",
             "| target | bound | figure | met |", "| --- | --- | --- | --- |"]
    for row in targets(results):
        met = {True: "yes", False: "**no**", None: "not measured"}[row["met"]]
        lines.append(f"| {row['target']} | {row['bound']} | {row['figure']} | {met} |")
    lines += ["", "## Figures", "", "```json", json.dumps(
        {k: v for k, v in results.items() if k != "meta"}, indent=2), "```", ""]
    return "\n".join(lines)


def _ratio_of(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """W3/W5 from the full suite's outcomes: the relay's and the peer's rates."""
    by = {o["contender"]: o for o in outcomes}
    relay, peer = by.get("relay"), by.get("peer")
    out: dict[str, Any] = {"outcomes": outcomes}
    if relay and peer and peer["msgs_per_s"]:
        out["ratio"] = round(relay["msgs_per_s"] / peer["msgs_per_s"], 2)
    return out


def _more(args: argparse.Namespace) -> Any:
    """W3 and W5 through the full suite's workloads, once each, on the shipped profile.
    The bench's stack starts when the first of them does, not beside W1's runs."""
    from bench.context import bench_for
    from bench.env import BenchEnv
    from bench.workloads.suite import Workloads

    started: list[Workloads] = []

    def run(name: str) -> Any:
        if not started:
            args.repeat, args.quick, args.no_profile, args.rerun = 1, False, True, False
            started.append(Workloads(bench_for(args, BenchEnv.start(), ["W3", "W5"])))
        outcomes = [o.to_json() for o in getattr(started[0], name.lower())()]
        return _ratio_of(outcomes) if name == "W3" else {"outcomes": outcomes}

    return run


def run_day(stack: Stack, work: Path, parts: list[str],
            more: Callable[[str], Any] | None = None) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"load_start": sys_load()}
    if "W1" in parts:
        results["W1"] = w1(stack, work)
    if "LAT" in parts:
        results["LAT1000"] = latency_run(stack, work, 1000, 2 * LAT_WINDOW_S)
        results["LAT500"] = latency_run(stack, work, 500, 2 * LAT_WINDOW_S,
                                        cpu_window=(35.0, 130.0))
    if "FIRST" in parts:
        results["FIRST"] = first_message(stack, work)
    for name in ("W3", "W5"):
        if name in parts and more is not None:
            results[name] = more(name)
    results["load_end"] = sys_load()
    return results


def run_default(args: argparse.Namespace, git: str) -> int:
    started = _now()
    quiet = check_quiet(args.force)
    info = outbox_relay.stack.up()  # the stack of `make demo`, its database and its history
    # spark-submit finds pyspark through the `python` on its PATH: the venv's.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "RELAY_POSTGRES_URL": info.postgres_url,
           "RELAY_KAFKA_BOOTSTRAP_SERVERS": info.kafka_bootstrap}
    config = build_config({"postgres": {"url": info.postgres_url, "sslmode": "disable"}},
                          env={})
    db = Database(config.postgres, "outbox-relay-bench")
    try:
        migrate(db)
    finally:
        db.close()
    parts = [p.strip().upper() for p in args.only.split(",")] if args.only else list(PARTS)
    log(f"default run: {', '.join(parts)} on the local stack, conf/local.toml")
    results = run_day(Stack(info.postgres_url, info.kafka_bootstrap, env), WORK, parts,
                      _more(args) if {"W3", "W5"} & set(parts) else None)
    results["meta"] = {"started": started, "ended": _now(),
                       "git": git, "quiet_check": quiet, "parts": parts}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench-default.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "bench-default.md").write_text(markdown(results))
    for row in targets(results):
        log(f"{row['target']}: {row['figure']} ({row['bound']}): "
            f"{ {True: 'met', False: 'MISSED', None: 'not measured'}[row['met']] }")
    return 0

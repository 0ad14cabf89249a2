"""``python -m bench run [--full] [--quick] [--only W1,W3] [--repeat 3] [--no-profile]``.

Without ``--full``: the default run of bench/default/report.py (``make bench``). With it:

Starts the bench's own local stack, runs the workloads against every contender and
writes reports/bench.json, reports/bench.md and the plots. ``--quick`` uses about a
tenth of the data and marks the report as quick. ``--rerun --only W2`` measures W2 again
(every contender of it) and replaces it in the existing report, which records when and
why (``--reason``). It refuses a busy machine unless ``--force`` (bench/probes/quiet.py).
Contenders alternate, ``--repeat`` runs each (bench/repeat.py), within the time plan
(bench/plan.py), which is printed at the start; a window spoiled by outside CPU is
measured again, at most ``--reruns`` times (bench/probes/outside.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from bench.common import DRIVER_MEMORY, Scale
from bench.context import bench_for
from bench.env import BenchEnv
from bench.probes.profiles import Profiles
from bench.probes.quiet import check_quiet
from bench.repeat import SPOIL_CORES
from bench.report import files as report
from bench.workloads.suite import Workloads

REPO = Path(__file__).resolve().parents[1]
# W1H and W3H: W1 and W3 with the horizon held by an open transaction (bench/horizon.py).
ALL = ("STARTSTOP", "W1", "W1H", "W2", "W3", "W3H", "W4", "W5", "W6", "SOAK", "W2C")


def _git() -> tuple[str, bool]:
    def run(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout

    return run("rev-parse", "--short", "HEAD").strip(), bool(run("status", "--porcelain",
                                                                 "relay").strip())


def _mem_gib() -> float:
    with open("/proc/meminfo", encoding="utf-8") as f:
        kb = int(f.readline().split()[1])
    return round(kb / 1024 / 1024, 1)


def sql_plans(env: BenchEnv, scale: Scale) -> dict[str, Any]:
    """The relay's claim and finish statements, round by round, on W1's and W3's shapes."""
    from bench.common import W1_KEYS, W1_TOPICS, W3_KEYS, W3_PER_TOPIC
    from bench.probes import sqlexp

    n3 = scale.w3_topics
    shapes = {
        "W1": (scale.w1_rows, W1_TOPICS, W1_KEYS, scale.w1_rows // 40),
        "W3": (n3 * W3_PER_TOPIC, n3, W3_KEYS, 1000),
    }
    out: dict[str, Any] = {"shapes": {}}
    for shape, (rows, topics, keys, limit) in shapes.items():
        print(f"[bench] claim SQL on the {shape} shape: {rows} rows, {topics} topics, "
              f"claim limit {limit} per topic", flush=True)
        out["shapes"][shape] = {
            "rows": rows, "topics": topics, "limit": limit,
            "variants": [r.to_json() for r in sqlexp.compare(env, rows, topics, keys, limit,
                                                             shape)],
        }
    return out


def rerun(args: argparse.Namespace) -> int:
    """Measure the --only workloads again and replace them in the report in --out."""
    import json

    path = Path(args.out) / "bench.json"
    results = json.loads(path.read_text())
    only = [w.strip().upper() for w in args.only.split(",")]
    if results["meta"]["quick"] != args.quick:
        raise SystemExit("a rerun must use the report's own scale (--quick or not)")
    started = dt.datetime.now().isoformat(timespec="seconds")
    quiet = check_quiet(args.force)
    load_start = [round(x, 2) for x in os.getloadavg()]
    env = BenchEnv.start()
    bench = bench_for(args, env, only)
    workloads = Workloads(bench)
    for name in only:
        results["workloads"][name] = [o.to_json() for o in getattr(workloads, name.lower())()]
    env.drop_databases()
    assert bench.outside is not None
    bench.outside.stop()
    if not args.keep_stack:
        env.stop_stack()
    git, dirty = _git()
    results["meta"].setdefault("reruns", []).append({
        "workloads": only, "started": started,
        "finished": dt.datetime.now().isoformat(timespec="seconds"),
        "sysload_start": load_start, "sysload_end": [round(x, 2) for x in os.getloadavg()],
        "git": git, "dirty": dirty, "reason": args.reason or "", "quiet_check": quiet,
    })
    report.write(results, Path(args.out))
    print(f"[bench] replaced {', '.join(only)} in {path}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.rerun:
        return rerun(args)
    if not args.full:
        from bench.default.report import run_default

        return run_default(args, _git()[0])
    only = [w.strip().upper() for w in args.only.split(",")] if args.only else list(ALL)
    started = time.time()
    git, dirty = _git()
    quiet = check_quiet(args.force)
    env = BenchEnv.start()
    bench = bench_for(args, env, only)
    scale = bench.scale
    results: dict[str, Any] = {
        "meta": {
            "quick": args.quick,
            "quiet_check": quiet,
            "forced": quiet["forced"],
            "started": dt.datetime.now().isoformat(timespec="seconds"),
            "machine": {"cores": os.cpu_count(), "mem_gib": _mem_gib()},
            "driver_memory": DRIVER_MEMORY,
            "sysload_start": [round(x, 2) for x in os.getloadavg()],
            "git": git,
            "dirty": dirty,
            "workloads": only,
            "plan": bench.plan,
            "spoil_cores": args.spoil_cores,
            "max_reruns": args.reruns,
        },
        "workloads": {},
    }
    workloads = Workloads(bench)
    failures: list[str] = []
    took: dict[str, int] = results["meta"].setdefault("workload_s", {})
    for name in only:
        began = time.time()
        try:
            outcomes = getattr(workloads, name.lower())()
            results["workloads"][name] = [o.to_json() for o in outcomes]
        except Exception:
            failures.append(name)
            print(f"[bench] {name} failed:\n{traceback.format_exc()}", file=sys.stderr)
        took[name] = round(time.time() - began)  # against the plan's estimate, next time
    if bench.plan["profile"]:
        profiles = Profiles(env, scale)
        results["profile"] = {}
        steps: list[tuple[str, Any]] = [
            ("W2 load, relay", lambda: profiles.latency()),
            ("W1 drain, relay", lambda: profiles.drain(False)),
        ]
        for label, step in steps:
            try:
                results["profile"][label] = step()
            except Exception:
                failures.append(f"profile {label}")
                print(f"[bench] profile {label} failed:\n{traceback.format_exc()}",
                      file=sys.stderr)
        try:
            results["sql"] = sql_plans(env, scale)
        except Exception:
            failures.append("sql")
            print(f"[bench] claim SQL failed:\n{traceback.format_exc()}", file=sys.stderr)
        try:
            explained = profiles.drain(True)
            results["explain"] = {"description": explained["description"],
                                  "statements": explained.pop("statements")}
        except Exception:
            failures.append("explain")
            print(f"[bench] explain failed:\n{traceback.format_exc()}", file=sys.stderr)
    env.drop_databases()
    assert bench.outside is not None
    bench.outside.stop()
    if not args.keep_stack:
        env.stop_stack()
    results["meta"].update(
        finished=dt.datetime.now().isoformat(timespec="seconds"),
        duration_s=round(time.time() - started),
        sysload_end=[round(x, 2) for x in os.getloadavg()],
        failures=failures,
    )
    report.write(results, Path(args.out))
    print(f"[bench] wrote {args.out}/bench.md and bench.json"
          + (f"; failed: {', '.join(failures)}" if failures else ""))
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the benchmark and write the report")
    r.add_argument("--full", action="store_true",
                   help="the full suite (soak, W4 and the rest); default: the default run "
                   "(W1, latency, CPU, first message, W3, W5), bench/default/report.py")
    r.add_argument("--quick", action="store_true", help="about a tenth of the data")
    r.add_argument("--only", help="comma-separated workloads, e.g. W1,W3 (default run: "
                   "W1, LAT, FIRST, W3, W5)")
    r.add_argument("--no-profile", action="store_true",
                   help="skip the in-process profiling and EXPLAIN runs")
    r.add_argument("--out", default=str(REPO / "reports"))
    r.add_argument("--rerun", action="store_true",
                   help="measure the --only workloads again, replacing them in --out's report")
    r.add_argument("--reason", help="with --rerun: why, recorded in the report")
    r.add_argument("--repeat", type=int, default=3,
                   help="runs of each contender, alternating (the time plan may cut it)")
    r.add_argument("--reruns", type=int, default=2,
                   help="re-runs at most of a window spoiled by CPU outside the contenders")
    r.add_argument("--spoil-cores", type=float, default=SPOIL_CORES,
                   help="outside CPU (mean cores) above which a window is spoiled")
    r.add_argument("--budget-min", type=float, default=120.0,
                   help="the time plan's budget for the whole run")
    r.add_argument("--keep-stack", action="store_true",
                   help="leave the bench's PostgreSQL and Kafka running at the end")
    r.add_argument("--force", action="store_true",
                   help="start on a busy machine anyway; the report is marked as forced")
    rep = sub.add_parser("report", help="rewrite bench.md and the plots from bench.json")
    rep.add_argument("--out", default=str(REPO / "reports"))
    args = p.parse_args(argv)
    if args.command == "run" and args.rerun and not args.only:
        p.error("--rerun needs --only")
    if args.command == "report":
        import json

        results = json.loads((Path(args.out) / "bench.json").read_text())
        report.write(results, Path(args.out))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

"""`make bench`: the default run, on the shipped profile under a user's conditions.

Everything runs as the README runs it: the local stack that `make demo` starts (its
`postgres` database, with whatever history it holds), `spark-submit jobs/relay.py
--config conf/local.toml` with only the addresses set, cold, every topic new to the
relay, beside the peer (bench/peer.py) where there is one, one contender at a time on a
settled machine. Each figure is read from Kafka by an independent consumer
(bench/oracle.py). The parts, in the order they run:

- W1: 10 topics of 3 partitions x 100,000 messages of 1 KB on the table with a history,
  relay then peer (bench/workloads/backlog.py, drain.py); W1V: the same on the table in
  id order, vacuumed and analysed;
- LAT: 1,000 msg/s on a new topic from 5 s after launch, its first minute; 500 msg/s the
  same way, its second minute for the steady state, the CPU and memory of the relay's
  processes, then idle (bench/workloads/latency.py);
- FIRST: launch to the first record, 1,000 messages waiting on a new topic (first.py);
- DRAIN: a scheduled drain (`--available-now`) of 1,000 messages over 10 topics;
- W3: 1,000 new topics of 1 partition x 100 messages of 1 KB;
- MANY: one relay for eight databases x 100,000 messages of 1 KB, against eight peers
  side by side, one per database, each twice in the order relay, peers, peers, relay,
  pooled (bench/workloads/many.py); then 500 msg/s in all into
  seven databases of a relay of eight whose eighth is down, its steady half-minute; then
  MANYIDLE: a relay of a hundred databases, a message every 0.1 s into one of them in
  turn (each idle for over a minute before its next), its second minute, then idle.

Reports go to reports/bench-default.json and .md. `--quick` checks the benchmark itself
at a tiny scale in a scratch database of the stack, and reports into its work folder.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.probes.quiet import check_broker, check_quiet
from bench.report.md import write
from bench.report.targets import rows
from bench.stack import REPO, Stack, local_stack, log, sys_load
from bench.workloads.drain import pair
from bench.workloads.first import first_record
from bench.workloads.latency import cases, latency_run, many_idle, many_stopped
from bench.workloads.many import many

WORK = REPO / ".relay-data" / "bench-default"


@dataclass(frozen=True)
class Scale:
    w1_rows: int
    w3_topics: int
    many_rows: int  # a database's, of MANY's eight
    minute_s: float
    idle_s: float
    idle_databases: int  # MANYIDLE's


FULL = Scale(w1_rows=1_000_000, w3_topics=1_000, many_rows=100_000, minute_s=60.0,
             idle_s=30.0, idle_databases=100)
QUICK = Scale(w1_rows=10_000, w3_topics=20, many_rows=1_000, minute_s=15.0, idle_s=10.0,
              idle_databases=10)

Part = Callable[[Stack, Path, Scale], dict[str, Any]]
PARTS: dict[str, Part] = {
    "W1": lambda stack, work, s: {"W1": pair(stack, work, "W1", 10, 3, s.w1_rows, True)},
    "W1V": lambda stack, work, s: {"W1V": pair(stack, work, "W1V", 10, 3, s.w1_rows)},
    "LAT": lambda stack, work, s: {name: latency_run(stack, work, name, case)
                                   for name, case in cases(s.minute_s, s.idle_s).items()},
    "FIRST": lambda stack, work, s: {"FIRST": first_record(stack, work)},
    "DRAIN": lambda stack, work, s: {"DRAIN": pair(stack, work, "DRAIN", 10, 3, 1_000,
                                                   debug=True)},
    "W3": lambda stack, work, s: {"W3": pair(stack, work, "W3", s.w3_topics, 1,
                                             100 * s.w3_topics)},
    "MANY": lambda stack, work, s: {
        "MANY": many(stack, work, s.many_rows),
        "MANYSTOP": latency_run(stack, work, "MANYSTOP", many_stopped(s.minute_s))},
    "MANYIDLE": lambda stack, work, s: {"MANYIDLE": latency_run(
        stack, work, "MANYIDLE", many_idle(s.minute_s, s.idle_s, s.idle_databases))},
}


def _git() -> tuple[str, bool]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout

    return (git("rev-parse", "--short", "HEAD").strip(),
            bool(git("status", "--porcelain", "outbox_relay", "jobs", "conf", "bench").strip()))


def _now() -> str:
    return dt.datetime.now().isoformat(timespec="seconds")


def parts_of(only: str | None) -> list[str]:
    if not only:
        return list(PARTS)
    names = [p.strip().upper() for p in only.split(",") if p.strip()]
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise SystemExit(f"unknown part(s) {', '.join(unknown)}: the parts are "
                         f"{', '.join(PARTS)}")
    return names


def run(args: argparse.Namespace) -> int:
    parts = parts_of(args.only)
    began = time.time()
    started = _now()
    quiet = check_quiet(args.force)
    git, dirty = _git()
    work = WORK / ("quick" if args.quick else "run")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    scale = QUICK if args.quick else FULL
    results: dict[str, Any] = {"load_start": sys_load(), "parts_s": {}}
    failures = []
    log(f"default run: {', '.join(parts)}{' (quick)' if args.quick else ''}, conf/local.toml")
    with local_stack(args.quick, work) as stack:
        quiet = check_broker(stack.partitions(), quiet, args.force)
        for name in parts:
            t0 = time.time()
            try:
                results.update(PARTS[name](stack, work, scale))
            except Exception:
                failures.append(name)
                log(f"{name} failed:\n{traceback.format_exc()}")
            results["parts_s"][name] = round(time.time() - t0)
    results["load_end"] = sys_load()
    results["meta"] = {"started": started, "ended": _now(),
                       "duration_s": round(time.time() - began), "git": git, "dirty": dirty,
                       "quick": args.quick, "quiet_check": quiet, "parts": parts,
                       "failures": failures, "machine": {"cores": os.cpu_count()}}
    out = Path(args.out) if args.out else work if args.quick else REPO / "reports"
    write(results, out)
    for row in rows(results):
        verdict = {True: "met", False: "MISSED", None: ""}[row["met"]]
        log(f"{row['target']}: {row['figure']} ({row['bound']}) {verdict}")
    log(f"wrote {out / 'bench-default.md'}")
    return 1 if failures else 0

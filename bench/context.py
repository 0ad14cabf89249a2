"""One benchmark run's shared state: the stack, the scale, the outside-CPU sampler and
the rule for re-running a spoiled window (bench/repeat.py)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.common import PROFILES, Outcome, Scale, log
from bench.env import BenchEnv
from bench.plan import make_plan
from bench.probes.outside import OutsideCpu
from bench.repeat import SPOIL_CORES, run_measured, spoiled
from outbox_relay.config import Config


@dataclass
class Bench:
    env: BenchEnv
    scale: Scale
    reruns: int = 2
    spoil_cores: float = SPOIL_CORES
    outside: OutsideCpu | None = None
    # Limits of the time plan (bench/plan.py), e.g. the peer's held-horizon cap.
    plan: dict[str, Any] = field(default_factory=dict)

    def repeat_for(self, workload: str) -> int:
        """Runs of each contender on `workload`: the plan's, else the scale's."""
        return int(self.plan.get("repeat", {}).get(workload, self.scale.repeat))

    def config(self, workload: str, url: str, label: str, **more: dict[str, Any]) -> Config:
        sections = {k: dict(v) for k, v in PROFILES[workload].items()}
        for key, values in more.items():
            sections.setdefault(key, {}).update(values)
        return self.env.relay_config(url, label, **sections)

    def measured(self, run: Callable[[str], Outcome], label: str,
                 rep: int | None = None) -> Outcome:
        """`run(label)` with its outside CPU recorded, run again (at most `reruns` times,
        under a label of its own) while that CPU spoiled its measured window."""

        def timed(attempt: int) -> Outcome:
            t0 = time.time()
            outcome = run(label if attempt == 0 else f"{label}-r{attempt}")
            window = outcome.window or (t0, time.time())
            seen = self.outside.window(*window) if self.outside else None
            outcome.extra["outside_cpu"] = seen
            return outcome

        def cores(outcome: Outcome) -> float | None:
            seen = outcome.extra.get("outside_cpu") or {}
            return seen.get("outside_cores")

        outcome, discarded = run_measured(timed, cores, self.reruns, self.spoil_cores)
        for d in discarded:
            log(f"re-run of {outcome.contender}: {d['why']}")
        outcome.extra["rerun_because"] = [d["why"] for d in discarded]
        # Still spoiled after the last re-run allowed: kept, and marked as such.
        outcome.extra["spoiled"] = spoiled(cores(outcome), self.spoil_cores)
        if rep is not None:
            outcome.extra["rep"] = rep
        return outcome


def bench_for(args: argparse.Namespace, env: BenchEnv, only: list[str]) -> Bench:
    """A run's shared state from `python -m bench run`'s arguments, its time plan printed
    (and kept in the report)."""
    plan = make_plan(only, args.repeat, args.quick, not args.no_profile and not args.rerun,
                     args.budget_min * 60)
    print("[bench] time plan:\n  " + "\n  ".join(plan.lines()), flush=True)
    return Bench(env, Scale(quick=args.quick, repeat=args.repeat), reruns=args.reruns,
                 spoil_cores=args.spoil_cores, outside=OutsideCpu().start(),
                 plan=plan.to_json())

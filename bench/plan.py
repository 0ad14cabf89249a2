"""The time plan (issue 10: the whole benchmark fits in 120 minutes).

Each workload's duration is estimated from its runs (seconds per run of each contender,
from the last full run on this 2-core machine, set-up between runs included, plus its
once-only parts: limits, floor probe). Cuts, in order, until the estimate fits the
budget: the one-delete peer (a second row, no target) runs once; the profiling and
EXPLAIN runs (no target) are skipped; the one-delete peer is capped at 2, then 1
minute; the peer's held-horizon cap drops from 15 to 5, then 4 minutes. A capped peer
is rated by what it delivered: an upper bound of its rate, because its dead-index walk
only grows, so relay/peer stays a lower bound. Only then do workloads lose
repetitions, those with the longest runs first, never below 2. The estimate carries a
margin for the peer's pace, which varies from day to day (W1's peer: 296 s a run in
342ec7b, 332 s in 5441183).
Soak, W2C and W4 run once in every plan: the report marks them as fewer than 3 runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BUDGET_S = 120 * 60
# Full scale, seconds per run: (relay, peer, peer one-delete), and once-only seconds.
# Each workload's wall time in the full quiet run of 5441183 (`meta.workload_s`: its
# runs, their loads and the set-up between them), split by contender in proportion to
# their launch-to-exit times, rounded up. W1H's peer: its uncapped runs at 0a14c2e (W1H
# alone, 15-minute cap) drained in 360-376 s; the one-delete peer's held runs were
# always capped, so its estimate stays the cap's.
_FULL: dict[str, tuple[tuple[float, float, float], float]] = {
    "STARTSTOP": ((23, 0, 0), 0),
    "W1": ((110, 355, 295), 100),  # + the limits
    "W1H": ((132, 390, 950), 0),
    "W2": ((95, 90 + 15, 0), 0),  # the peer's runs carry the floor probe's (one each)
    "W3": ((52, 16, 10), 71),  # + the limits
    "W3H": ((50, 18, 12), 6),
    "W4": ((0, 0, 0), 410),
    "W5": ((62, 58, 0), 0),
    "W6": ((90, 108, 76), 10),
    "SOAK": ((0, 0, 0), 20 * 60 + 50),
    "W2C": ((0, 0, 0), 310),
}
_HELD = ("W1H", "W3H")
_ONCE = ("SOAK", "W2C", "W4")
PROFILE_S = 8 * 60
HELD_CAP_S, HELD_CAP_CUTS_S = 15 * 60, (5 * 60, 4 * 60)
BATCH_CAP_CUTS_S = (2 * 60, 60)
# A capped run's load and set-up, beyond its cap.
CAP_SETUP_S = 15
# The peer's pace from one day to the next, and what the per-run figures round away.
MARGIN = 1.02


def _quick(seconds: float) -> float:
    """About a tenth of the data, but start-ups and warm-ups stay: a rough quarter."""
    return 15 + 0.25 * seconds if seconds else 0.0


@dataclass
class Plan:
    repeat: dict[str, int]
    peer_batch_runs: int
    peer_held_cap_s: float
    peer_batch_cap_s: float | None
    profile: bool
    estimate_s: dict[str, float]
    budget_s: float
    cuts: list[str] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        return MARGIN * sum(self.estimate_s.values())

    def to_json(self) -> dict[str, Any]:
        return {"repeat": self.repeat, "peer_batch_runs": self.peer_batch_runs,
                "peer_held_cap_s": self.peer_held_cap_s,
                "peer_batch_cap_s": self.peer_batch_cap_s, "profile": self.profile,
                "estimate_s": {k: round(v) for k, v in self.estimate_s.items()},
                "total_s": round(self.total_s), "budget_s": self.budget_s, "cuts": self.cuts}

    def lines(self) -> list[str]:
        out = [f"{w}: {self.repeat.get(w, 1)} run(s) per contender, about "
               f"{s / 60:.0f} min" for w, s in self.estimate_s.items()]
        out.append(f"total about {self.total_s / 60:.0f} min of {self.budget_s / 60:.0f}, "
                   f"with a {100 * (MARGIN - 1):.0f}% margin")
        return out + [f"cut: {c}" for c in self.cuts]


def _estimate(workload: str, repeat: int, plan: Plan, quick: bool) -> float:
    if workload == "PROFILE":
        return _quick(PROFILE_S) if quick else PROFILE_S
    (relay, peer, batch), once = _FULL[workload]
    if workload in _HELD:
        peer = min(peer, plan.peer_held_cap_s + CAP_SETUP_S)
        batch = min(batch, plan.peer_held_cap_s + CAP_SETUP_S)
    if plan.peer_batch_cap_s is not None:
        batch = min(batch, plan.peer_batch_cap_s + CAP_SETUP_S)
    runs = 1 if workload in _ONCE else repeat
    total = runs * (relay + peer) + min(runs, plan.peer_batch_runs) * batch + once
    return _quick(total) if quick else total


def make_plan(workloads: list[str], repeat: int, quick: bool, profile: bool,
              budget_s: float = BUDGET_S) -> Plan:
    plan = Plan(repeat={w: (1 if w in _ONCE else repeat) for w in workloads},
                peer_batch_runs=repeat, peer_held_cap_s=HELD_CAP_S, peer_batch_cap_s=None,
                profile=profile, estimate_s={}, budget_s=budget_s)

    def estimate() -> None:
        plan.estimate_s = {w: _estimate(w, plan.repeat[w], plan, quick) for w in workloads}
        if plan.profile:
            plan.estimate_s["PROFILE"] = _estimate("PROFILE", 1, plan, quick)

    estimate()
    cuts = [("the one-delete peer runs once", lambda: setattr(plan, "peer_batch_runs", 1)),
            ("no profiling or EXPLAIN runs", lambda: setattr(plan, "profile", False)),
            *[(f"the one-delete peer capped at {cap // 60} min",
               lambda cap=cap: setattr(plan, "peer_batch_cap_s", cap))
              for cap in BATCH_CAP_CUTS_S],
            *[(f"the peer's held-horizon cap {cap // 60} min",
               lambda cap=cap: setattr(plan, "peer_held_cap_s", cap))
              for cap in HELD_CAP_CUTS_S]]
    for why, cut in cuts:
        if plan.total_s <= budget_s:
            return plan
        cut()
        plan.cuts.append(why)
        estimate()
    # The last resort: fewer repetitions, the longest workloads first, never below 2.
    while plan.total_s > budget_s:
        can = [w for w in workloads if w not in _ONCE and plan.repeat[w] > 2]
        if not can:
            plan.cuts.append("still over budget with 2 runs each")
            break
        longest = max(can, key=lambda w: plan.estimate_s[w])
        plan.repeat[longest] -= 1
        plan.cuts.append(f"{longest}: {plan.repeat[longest]} runs")
        estimate()
    return plan

"""The default run's targets: issue 49's, and W1's launch to exit against the peer from
before. Each row has its bound, what it rests on measured in the same run (the peer's
figure, or the two times of a ratio) and, when missed, the same run's measurements that
say where the time or the CPU went."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Results = dict[str, Any]


def dig(results: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(results, dict) or key not in results:
            return None
        results = results[key]
    return results


def num(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    text = f"{value:,}" if isinstance(value, int) else f"{value:,.3g}" if value < 10 else \
        f"{value:,.1f}"
    return text + unit


def lanes(run: Any) -> str:
    got = dig(run, "lanes")
    if not got:
        return "no summary line"
    return f"{got['direct']:,} by the driver's producer, {got['spark']:,} by Spark's executors"


def kinds(split: Any, unit: str) -> str:
    """A figure's split over the relay's processes, largest first (none of nought)."""
    order = sorted((k for k in split or {} if split[k]), key=lambda k: -split[k])
    return ", ".join(f"{k} {num(split[k], unit)}" for k in order) or "-"


def startup(run: Any, until: str = "first_record_s") -> str:
    """Where a relay's time before its first record (or its exit) went, from its debug
    log's start-up marks (bench/contenders.py MARKS), in seconds."""
    marks = dig(run, "marks_s")
    if not marks:
        return "no start-up marks"
    steps = [("spark-submit's launch to the relay's Python", "python"),
             ("to the services answering", "services"), ("to the relay wired", "wired"),
             ("to the first record in Kafka", "first_record_s")]
    if until == "exit_s":
        steps += [("to the last record", "last_record_s"), ("to the exit", "exit_s")]
    at = {**marks, **{k: run.get(k) for k in ("first_record_s", "last_record_s", "exit_s")}}
    parts, before = [], 0.0
    for text, key in steps:
        if at.get(key) is None:
            continue
        parts.append(f"{text} {at[key] - before:.2f}")
        before = at[key]
    session = ("no Spark session built" if "session_building" not in marks else
               f"the Spark session built from {marks['session_building']:.2f} s after launch"
               + (f", ready at {marks['session_ready']:.2f} s" if "session_ready" in marks
                  else ", not ready before the end"))
    return "; ".join(parts) + f" ({session}; {lanes(run)})"


def plan_name(run: Any) -> str:
    """The index the peer's select was planned on (else its scan), from its recorded plan."""
    plan = dig(run, "peer_select_plan") or ""
    index = re.search(r"(?:using|Index Scan on) (\S+)", plan)
    return index[1] if index else plan.split(";")[0]


def _pair_detail(key: str) -> Callable[[Results], str]:
    def detail(part: Results) -> str:
        relay, peer = part.get("relay", {}), part.get("peer", {})
        capped = f", capped at {peer['capped_at_s']:.0f} s: a lower bound" \
            if peer.get("capped_at_s") else ""
        # MANY's eight peers record no plan: no row then names one.
        plan = plan_name(peer)
        return (f"relay {num(relay.get(key), ' s')}, peer {num(peer.get(key), ' s')}{capped}"
                + (f"; the peer's select on {plan}" if plan else ""))
    return detail


def _drain_why(part: Results) -> str:
    relay, peer = part.get("relay", {}), part.get("peer", {})
    return (f"the relay {num(relay.get('msgs_per_s'))} msg/s once delivering against the "
            f"peer's {num(peer.get('msgs_per_s'))}, {num(relay.get('missing'))} missing; "
            f"{lanes(relay)}; CPU per 1,000 messages {num(relay.get('cpu_tree_s_per_1k'), ' s')}"
            f" against the peer's {num(peer.get('cpu_tree_s_per_1k'), ' s')}")


def _each_drain(part: Results, who: str) -> str:
    """A contender's drains of a part that ran each twice (MANY), in their order."""
    return ", ".join(num(d.get("drain_s"), " s") for d in dig(part, "drains", who) or [])


def _exit_why(part: Results) -> str:
    def times(run: Any) -> str:
        return "first record {}, last {}, exit {} s after launch (code {})".format(
            *(num(dig(run, k)) for k in ("first_record_s", "last_record_s", "exit_s")),
            dig(run, "exit_code"))

    return (f"the relay: {times(part.get('relay'))}; the peer: {times(part.get('peer'))}; "
            f"{lanes(part.get('relay'))}")


@dataclass(frozen=True)
class Target:
    name: str
    part: str
    figure: Callable[[Results], Any]
    bound: float | None = None
    higher: bool = False
    beside: Callable[[Results], str] = lambda part: ""
    why: Callable[[Results], str] = lambda part: ""


def rounds(part: Results) -> str:
    batches, seconds = dig(part, "summary", "batches"), dig(part, "summary", "seconds")
    rate = f" ({batches / seconds:.1f} a second)" if batches and seconds else ""
    return f"{num(batches)} batches in {num(seconds, ' s')}{rate}; {lanes(part)}"


def late(part: Results, window: str) -> str:
    got = dig(part, window, "late")
    if not got:
        return "no message late"
    return (f"{got['n']:,} messages waited over {got['over_s']:g} s, committed "
            f"{got['committed_from_s']:g}-{got['committed_to_s']:g} s after launch")


def _lat_why(window: str) -> Callable[[Results], str]:
    return lambda part: f"{late(part, window)}; {rounds(part)}"


def _drain_pairs(name: str, part: str, exit_bound: float | None) -> list[Target]:
    """relay / peer on a drain: issue 49's bound on the drain; launch to exit beside it."""
    return [Target(f"{name}: drain (first record to last), relay / peer", part,
                   lambda p: p.get("drain_ratio"), 2.0, True, _pair_detail("drain_s"),
                   _drain_why),
            Target(f"{name}: launch to exit, relay / peer", part,
                   lambda p: p.get("exit_ratio"), exit_bound, True, _pair_detail("exit_s"),
                   _exit_why)]


TARGETS: list[Target] = [
    Target("launch to the first record delivered, 1,000 messages waiting on a new topic (s)",
           "FIRST", lambda p: dig(p, "relay", "first_record_s"), 4.0,
           beside=lambda p: f"peer {num(dig(p, 'peer', 'first_record_s'), ' s')}",
           why=lambda p: startup(p.get("relay"))),
    Target("500 msg/s, steady state (the second minute): p50 (s)", "LAT500",
           lambda p: dig(p, "steady", "p50_s"), 0.1, why=_lat_why("steady")),
    Target("500 msg/s, steady state: p99 (s)", "LAT500",
           lambda p: dig(p, "steady", "p99_s"), 0.2, why=_lat_why("steady")),
    Target("500 msg/s, steady state: CPU of the relay's processes (cores)", "LAT500",
           lambda p: dig(p, "steady", "cores"), 0.1,
           beside=lambda p: f"{num(dig(p, 'steady', 'cpu_s'))} CPU-s a minute",
           why=lambda p: kinds(dig(p, "steady", "by_kind"), " cores")),
    Target("500 msg/s: peak memory of the relay's processes, RSS summed (GB)", "LAT500",
           lambda p: dig(p, "memory", "peak_gb"), 1.0,
           why=lambda p: kinds(dig(p, "memory", "by_kind_mb"), " MB")),
    Target("1,000 msg/s on a new topic from 5 s after launch: p99 over the first minute (s)",
           "LAT1000", lambda p: dig(p, "first_minute", "p99_s"), 0.5,
           beside=lambda p: f"{num(dig(p, 'first_minute', 'cpu_s'))} CPU-s",
           why=lambda p: f"max {num(dig(p, 'first_minute', 'max_s'), ' s')}; "
           f"{late(p, 'first_minute')}; start-up: {startup(p)}"),
    Target("idle: CPU of the relay's processes (cores)", "LAT500",
           lambda p: dig(p, "idle", "cores"), 0.02,
           why=lambda p: kinds(dig(p, "idle", "by_kind"), " cores")),
    *_drain_pairs("W3, 1,000 new topics x 100", "W3", None),
    # W1's launch to exit keeps the bound the default run had before issue 49.
    *_drain_pairs("W1, 1M x 1 KB over 10 topics, the table with a history", "W1", 1.5),
    *_drain_pairs("W1, the table in id order, vacuumed and analysed", "W1V", 1.5),
    *_drain_pairs("MANY, 8 databases x 100,000 x 1 KB: one relay / 8 peers side by side, "
                  "each twice (relay, peers, peers, relay), pooled",
                  "MANY", None),
    Target("MANY, each order's drain alone: relay then peers; peers then relay (relay / "
           "peer)", "MANY", lambda p: "; ".join(num(r) for r in p.get("drain_ratio_by_order")
                                                or []) or None,
           beside=lambda p: f"drains: relay {_each_drain(p, 'relay')}; peers "
           f"{_each_drain(p, 'peer')}"),
    Target("MANY: relay / peer at most on this machine, were the relay's own processes "
           "to cost no CPU (the rest of the machine's CPU over the relay's run, on every "
           "core)", "MANY", lambda p: p.get("ceiling_ratio"),
           beside=lambda p: f"the rest {num(p.get('rest_cpu_s'), ' CPU-s')}: "
           f"{num(p.get('floor_s'), ' s')} at least"),
    Target("MANY, one database of 8 down: 500 msg/s in all into the other 7, p99 (s)",
           "MANYSTOP", lambda p: dig(p, "steady", "p99_s"), 0.5, why=_lat_why("steady")),
    Target("MANYIDLE, 100 idle databases, 10 msg/s into one at a time: p99 (s)",
           "MANYIDLE", lambda p: dig(p, "trickle", "p99_s"), 1.0, why=_lat_why("trickle")),
    Target("MANYIDLE, 100 idle databases: CPU of the relay's processes (cores)", "MANYIDLE",
           lambda p: dig(p, "idle", "cores"), 0.1,
           beside=lambda p: f"{num(dig(p, 'trickle', 'cores'), ' cores')} under the trickle",
           why=lambda p: kinds(dig(p, "idle", "by_kind"), " cores")),
    Target("scheduled drain, 1,000 messages over 10 topics (--available-now): launch to "
           "exit (s)", "DRAIN", lambda p: dig(p, "relay", "exit_s"), 6.0,
           beside=lambda p: f"peer {num(dig(p, 'peer', 'exit_s'), ' s')}",
           why=lambda p: startup(p.get("relay"), "exit_s")),
]
# The lanes' split, from the relay's summary line, for these runs (no bound).
LANE_RUNS = (("W1", ("W1", "relay")), ("W1, id order", ("W1V", "relay")),
             ("MANY", ("MANY", "relay")),
             ("first record", ("FIRST", "relay")))


def met(target: Target, figure: Any) -> bool | None:
    if target.bound is None or not isinstance(figure, int | float):
        return None
    return figure >= target.bound if target.higher else figure <= target.bound


def rows(results: Results) -> list[dict[str, Any]]:
    """One row a target whose part ran, with the run's figure."""
    out = []
    for t in TARGETS:
        part = results.get(t.part)
        if not isinstance(part, dict):
            continue  # not run, or failed: the report says which
        figure = t.figure(part)
        ok = met(t, figure)
        out.append({"target": t.name, "figure": figure, "met": ok,
                    "bound": "-" if t.bound is None else
                    f"{'>=' if t.higher else '<='} {t.bound:g}",
                    "beside": t.beside(part), "why": t.why(part) if ok is False else ""})
    split = "; ".join(f"{name}: {lanes(dig(results, *path))}" for name, path in LANE_RUNS
                      if dig(results, *path) is not None)
    if split:
        out.append({"target": "lanes: the relay's messages by lane (its summary line)",
                    "figure": split, "met": None, "bound": "-", "beside": "", "why": ""})
    return out

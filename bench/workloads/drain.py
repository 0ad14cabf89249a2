"""Drains: a contender empties a backlog and exits (the relay with `--available-now`, the
peer with `--drain`), and the pair of them, relay first, each on a backlog of its own
in new topics. W1 (with a history and in id order), W3 and the scheduled drain are
pairs."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from bench import contenders
from bench.contenders import PEER, RELAY
from bench.oracle import Delivery, read_back, watch
from bench.probes.cpu import CpuMeter
from bench.stack import Stack, log
from bench.workloads.backlog import fill, peer_plan

DRAIN_TIMEOUT_S = 900.0
# A peer whose select walks the primary key slows down as it deletes (bench/workloads/
# backlog.py): its rate over its first PEER_WALK_CAP_S is an upper bound of its rate over
# the whole backlog, so relay / peer is then a lower bound. The whole walk of W1 took
# 267-323 s, which a 20-minute run cannot give it.
PEER_WALK_CAP_S = 120.0
PRIMARY_KEY = "kafka_messages_pkey"


def drain(stack: Stack, work: Path, who: str, topics: list[str], rows: int, label: str,
          cap_s: float | None = None, debug: bool = False) -> dict[str, Any]:
    """One contender's drain of the `rows` waiting in `topics`: seconds after launch to
    its first and last record in Kafka and to its exit, its CPU (its own process tree's
    and the whole machine's), and what a consumer read back."""
    load = stack.settled(topics)
    log_path = work / f"{label}.log"
    cpu = CpuMeter()
    t0 = time.time()
    proc = (contenders.relay(stack, "--available-now", log_path=log_path, debug=debug)
            if who == RELAY else contenders.peer(stack, "--drain", log_path=log_path))
    cap = cap_s or DRAIN_TIMEOUT_S
    seen = watch(stack, topics, rows, t0, cap, lambda: proc.poll() is None)
    capped = seen.last_s is None and proc.poll() is None
    code = contenders.stop(proc) if capped else contenders.wait(proc, DRAIN_TIMEOUT_S)
    exit_s = time.time() - t0
    cpu.stop()
    out: dict[str, Any] = {
        **timeline(seen, exit_s), "exit_code": code, "capped_at_s": cap if capped else None,
        "load_before": load, **cpu.to_json(seen.delivered),
        **read_back(stack, topics, seen.delivered if capped else rows),
    }
    if who == RELAY:
        out.update(contenders.relay_output(log_path, t0))
    else:
        out.update(contenders.peer_output(log_path))
    return out


def timeline(seen: Delivery, exit_s: float) -> dict[str, Any]:
    """Launch to the first and the last record, the drain (first to last) and its rate,
    and launch to exit."""
    end = seen.last_s if seen.last_s is not None else seen.ended_s
    drain_s = end - seen.first_s if seen.first_s is not None else None
    return {
        "first_record_s": rounded(seen.first_s), "last_record_s": rounded(seen.last_s),
        "drain_s": rounded(drain_s), "exit_s": round(exit_s, 2), "delivered": seen.delivered,
        "msgs_per_s": round(seen.delivered / drain_s) if drain_s else None,
    }


def rounded(seconds: float | None) -> float | None:
    return round(seconds, 2) if seconds is not None else None


def versus(relay: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """relay / peer: the drain as rates (first record to last), launch to exit as times.
    A capped peer's figures are bounds (above), so the ratios are lower bounds. None
    unless the relay delivered every row."""
    out: dict[str, Any] = {"peer_capped": peer.get("capped_at_s") is not None}
    if relay.get("missing") == 0 and relay.get("msgs_per_s") and peer.get("msgs_per_s"):
        out["drain_ratio"] = round(relay["msgs_per_s"] / peer["msgs_per_s"], 2)
        out["exit_ratio"] = round(peer["exit_s"] / relay["exit_s"], 2)
    return out


def pair(stack: Stack, work: Path, name: str, n_topics: int, partitions: int, rows: int,
         history: bool = False, debug: bool = False) -> dict[str, Any]:
    """The relay, then the peer, each draining `rows` over `n_topics` new topics of
    `partitions`, filled the same way (bench/workloads/backlog.py)."""
    out: dict[str, Any] = {}
    width = len(str(n_topics - 1))
    for who in (RELAY, PEER):
        label = f"{name.lower()}-{who}-{uuid.uuid4().hex[:6]}"
        topics = [f"bench.{label}.t{i:0{width}d}" for i in range(n_topics)]
        stack.create_topics(topics, partitions)
        try:
            fill(stack, topics, rows, history)
            plan = peer_plan(stack, topics[0])
            cap = PEER_WALK_CAP_S if who == PEER and PRIMARY_KEY in plan else None
            out[who] = {**drain(stack, work, who, topics, rows, label, cap,
                                debug and who == RELAY), "peer_select_plan": plan}
        finally:
            out.setdefault(who, {})["outbox_left"] = stack.forget(topics)
        got = out[who]
        log(f"{name} {who}: first record {got['first_record_s']} s, drain {got['drain_s']} s, "
            f"exit {got['exit_s']} s (code {got['exit_code']}), {got['distinct']} of {rows} "
            f"read back, {got['duplicates']} duplicates, {got['inversions']} inversions")
    return {**out, **versus(out[RELAY], out[PEER])}

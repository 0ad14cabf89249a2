"""Launch to the first record: 1,000 messages wait on a new topic, and the contender is
started as a continuous service (the relay as the README's first command, the peer
without --drain); the time is launch to the first record in Kafka. Each is stopped once
Kafka holds all 1,000, and a consumer reads them back.

The relay runs with its debug log on (bench/contenders.py): its start-up marks break
the time down (launch to its Python, to the services answering, to the relay wired, to
the first record; the Spark session built beside)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from bench import contenders
from bench.contenders import PEER, RELAY
from bench.oracle import read_back, watch
from bench.stack import Stack, log
from bench.workloads.backlog import fill
from bench.workloads.drain import rounded

WAITING = 1_000


def _one(stack: Stack, work: Path, who: str, topic: str) -> dict[str, Any]:
    fill(stack, [topic], WAITING)
    load = stack.settled([topic])
    log_path = work / f"{topic.removeprefix('bench.')}.log"
    t0 = time.time()
    proc = (contenders.relay(stack, log_path=log_path, debug=True) if who == RELAY
            else contenders.peer(stack, log_path=log_path))
    seen = watch(stack, [topic], WAITING, t0, 120.0, lambda: proc.poll() is None)
    out = {"first_record_s": rounded(seen.first_s), "all_records_s": rounded(seen.last_s),
           "exit_code": contenders.stop(proc), "load_before": load,
           **read_back(stack, [topic], WAITING)}
    if who == RELAY:
        out.update(contenders.relay_output(log_path, t0))
    return out


def first_record(stack: Stack, work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for who in (RELAY, PEER):
        topic = f"bench.first-{who}-{uuid.uuid4().hex[:6]}"
        stack.create_topics([topic], 3)
        try:
            out[who] = _one(stack, work, who, topic)
        finally:
            stack.forget([topic])
        log(f"FIRST {who}: {out[who]}")
    return out

"""MANY: one relay for eight outbox databases against eight peers side by side, one per
database (issue 50). Each database is a new database of the stack's PostgreSQL, migrated,
with a backlog of its own in id order (bench/workloads/backlog.py) over two new topics of
3 partitions, its rows numbered apart from the other databases' so that the read-back
tells every row of every database apart.

The relay is the README's command on the shipped profile, `--available-now`, with the
databases given as `RELAY_DATABASES` (docs/many-databases.md); the peers are eight
bench/peer.py processes started together, each on its database's new backlog. The drain
runs from the first record of any database to the last of all, launch to exit until the
last process exits; CPU is the contenders' process trees' and the machine's. The run
also says how far the relay could outrun the peers on this machine at all (`ceiling`).

Each contender drains twice, in the order relay, peers, peers, relay (ORDER), and its
figures are the two drains' pooled (`pooled`): whoever drains first meets the stack as
it was just started. The same relay drained the same 8 x 100,000 in 19.1 s on a broker
started just before, then 16.6 and 15.1 s, the relay's own producer thread spending 7.4,
then 4.1 and 3.3 CPU-s (docs/performance.md): a relay, then the peers, as before, charged
that to the relay alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import contenders
from bench.contenders import PEER, RELAY
from bench.oracle import read_back, watch
from bench.probes.cpu import CpuMeter
from bench.stack import Stack, free_port, log, scratch_database
from bench.workloads.backlog import checkpointed, fill
from bench.workloads.drain import DRAIN_TIMEOUT_S, timeline, versus

DATABASES = 8
TOPICS_PER_DATABASE, PARTITIONS = 2, 3


def relaying(stack: Stack, work: Path, entries: list[dict[str, str]]) -> Stack:
    """The stack whose env gives the relay `entries` as `RELAY_DATABASES`, with a ledger
    and checkpoint of its own under `work`: each database's go under those paths by its
    name (db0, ...), and under the shipped profile's paths they would sit where `make
    demo`'s one database keeps its ledger, which then is no Delta table."""
    own = work / f"many-{uuid.uuid4().hex[:6]}"
    return replace(stack, env={**stack.env, "RELAY_DATABASES": json.dumps(entries),
                               "RELAY_LEDGER__PATH": str(own / "ledger"),
                               "RELAY_RELAY__CHECKPOINT_PATH": str(own / "checkpoint")})


@contextlib.contextmanager
def databases(stack: Stack, work: Path, n: int) -> Iterator[tuple[Stack, list[str]]]:
    """With n > 0: n new databases of the stack and one more that is down (a port where
    nothing listens), all given to the relay (`relaying`); the stack that says so, and the
    URLs of the n. With 0: the stack as it is, and its database."""
    if not n:
        yield stack, [stack.url]
        return
    with contextlib.ExitStack() as held:
        urls = [held.enter_context(scratch_database(f"many{i}")) for i in range(n)]
        down = f"postgresql://postgres@127.0.0.1:{free_port()}/down"
        entries = [*({"name": f"db{i}", "url": url} for i, url in enumerate(urls)),
                   {"name": "down", "url": down}]
        yield relaying(stack, work, entries), urls


# Each contender first once and last once: a stack's warming then favours neither.
ORDER = (RELAY, PEER, PEER, RELAY)
# Summed over a contender's drains; the times are their means (`pooled`).
_SUMMED = ("delivered", "records", "distinct", "duplicates", "inversions", "missing",
           "cpu_tree_s", "cpu_machine_s", "outbox_left")
_MEANS = ("first_record_s", "last_record_s", "drain_s", "exit_s")


def many(stack: Stack, work: Path, rows: int) -> dict[str, Any]:
    """The relay and the peers, each twice in ORDER, each drain on eight new backlogs of
    `rows`; each contender's figures pooled over its two, with each drain's in `drains`."""
    drains: dict[str, list[dict[str, Any]]] = {RELAY: [], PEER: []}
    with contextlib.ExitStack() as held:
        urls = [held.enter_context(scratch_database(f"many{i}")) for i in range(DATABASES)]
        for who in ORDER:
            drains[who].append(_backlog_drained(stack, work, who, urls, rows))
    relay, peer = pooled(drains[RELAY]), pooled(drains[PEER])
    by_order = [versus(drains[RELAY][0], drains[PEER][0]),
                versus(drains[RELAY][1], drains[PEER][1])]
    return {RELAY: relay, PEER: peer, "drains": drains,
            "drain_ratio_by_order": [o.get("drain_ratio") for o in by_order],
            **versus(relay, peer),
            **ceiling(relay, peer, os.cpu_count() or 1, relay.get("delivered", 0))}


def _backlog_drained(stack: Stack, work: Path, who: str, urls: list[str],
                     rows: int) -> dict[str, Any]:
    """One drain by `who` of eight new backlogs of `rows`, over topics of its own."""
    label = f"many-{who}-{uuid.uuid4().hex[:6]}"
    topics = {url: [f"bench.{label}.d{i}.t{j}" for j in range(TOPICS_PER_DATABASE)]
              for i, url in enumerate(urls)}
    every = [t for ts in topics.values() for t in ts]
    stack.create_topics(every, PARTITIONS)
    got: dict[str, Any] = {}
    try:
        _filled(stack, urls, topics, rows)
        got = _drain(stack, work, who, urls, every, rows * DATABASES, label)
    finally:
        got["outbox_left"] = sum(replace(stack, url=url).forget(ts)
                                 for url, ts in topics.items())
    log(f"MANY {who}: first record {got['first_record_s']} s, drain {got['drain_s']} "
        f"s, exit {got['exit_s']} s (codes {got['exit_codes']}), {got['distinct']} of "
        f"{rows * DATABASES} read back, {got['duplicates']} duplicates")
    return got


def _filled(stack: Stack, urls: list[str], topics: dict[str, list[str]], rows: int) -> None:
    """Every database's backlog, as many filled at once as the machine has cores (each
    database's alone in its table, so as a fill one after the other leaves it), then one
    checkpoint. One after the other, with a checkpoint each, they took about 45 s a
    drain on a machine where MANY lasted 382-410 s, past its five minutes; at once,
    about 6-7 s less a drain (docs/performance.md)."""
    def one(i: int) -> None:
        url = urls[i]
        fill(replace(stack, url=url), topics[url], rows, first_row=i * rows, checkpoint=False)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(one, range(len(urls))))  # list: a fill's error is raised here
    checkpointed(stack)


def pooled(drains: list[dict[str, Any]]) -> dict[str, Any]:
    """A contender's drains as one: counts and CPU summed, times their means, the rate
    all its messages over all its drains' time. Without every figure of every drain
    (one failed), only what all have."""
    out: dict[str, Any] = {}
    for key in _SUMMED + _MEANS:
        values = [v for d in drains if isinstance(v := d.get(key), int | float)]
        if drains and len(values) == len(drains):
            total = sum(values)
            out[key] = round(total, 2) if key in _SUMMED else round(total / len(values), 2)
    if out.get("delivered") and out.get("drain_s"):
        out["msgs_per_s"] = round(out["delivered"] / (out["drain_s"] * len(drains)))
        if "cpu_tree_s" in out:
            out["cpu_tree_s_per_1k"] = round(out["cpu_tree_s"] / out["delivered"] * 1000, 4)
    out["exit_codes"] = [c for d in drains for c in d.get("exit_codes", [])]
    if all(d.get("lanes") for d in drains):
        out["lanes"] = {lane: sum(d["lanes"][lane] for d in drains)
                        for lane in ("direct", "spark")}
    return out


def ceiling(relay: dict[str, Any], peer: dict[str, Any], cores: int,
            messages: int) -> dict[str, Any]:
    """How far the relay could outrun the peers on this machine were its own processes
    to cost no CPU: the rest of the machine (PostgreSQL, the broker, the bench's
    consumer) used `cpu_machine_s - cpu_tree_s` over the relay's run, which on `cores`
    takes that over `cores` seconds at least. The drain's bound is a ratio of rates, so
    this is too: all the messages in that time, over the peers' rate. None unless both
    were measured."""
    try:
        rest = relay["cpu_machine_s"] - relay["cpu_tree_s"]
        floor_s = rest / cores
        return {"rest_cpu_s": round(rest, 2), "floor_s": round(floor_s, 2),
                "ceiling_ratio": round(messages / floor_s / peer["msgs_per_s"], 2)}
    except (KeyError, TypeError, ZeroDivisionError):
        return {}


def _launch(stack: Stack, work: Path, who: str, urls: list[str],
            label: str) -> list[subprocess.Popen[bytes]]:
    if who == RELAY:
        databases = [{"name": f"db{i}", "url": url} for i, url in enumerate(urls)]
        return [contenders.relay(relaying(stack, work, databases), "--available-now",
                                 log_path=work / f"{label}.log")]
    return [contenders.peer(replace(stack, url=url), "--drain",
                            log_path=work / f"{label}-{i}.log") for i, url in enumerate(urls)]


def _drain(stack: Stack, work: Path, who: str, urls: list[str], topics: list[str],
           rows: int, label: str) -> dict[str, Any]:
    load = stack.settled(topics)
    cpu = CpuMeter()
    t0 = time.time()
    procs = _launch(stack, work, who, urls, label)
    seen = watch(stack, topics, rows, t0, DRAIN_TIMEOUT_S,
                 lambda: any(p.poll() is None for p in procs))
    codes = [contenders.wait(p, DRAIN_TIMEOUT_S) for p in procs]
    exit_s = time.time() - t0
    cpu.stop()
    out: dict[str, Any] = {
        **timeline(seen, exit_s), "exit_codes": codes,
        "load_before": load, **cpu.to_json(seen.delivered),
        **read_back(stack, topics, rows),
    }
    if who == RELAY:
        out.update(contenders.relay_output(work / f"{label}.log", t0))
    return out

"""Scenario 1: SIGKILL the relay's whole process group again and again during a drain.

Random kills land anywhere in the batch cycle (lock, claim, JDBC read, Kafka write,
delete, ledger copy); failpoint kills land exactly between Kafka's acknowledgement
and the delete's commit. After each kill the sessions the dead process left behind
are its messages in flight: the only ones allowed to arrive twice.
"""

from __future__ import annotations

import itertools
import random
import signal
import statistics
import time
from collections import Counter, defaultdict
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from outbox_relay.stack import StackInfo
from tests.faults.conftest import Scenario
from tests.faults.infra import create_topics, outbox_count, query, scalar, unique, wait_until
from tests.faults.oracle import high_watermarks, ledger_entries, read_all, verdict
from tests.faults.outbox_writer import Outbox, traffic
from tests.faults.recorders import ownership
from tests.faults.relay_proc import (
    RelayProc,
    lane_tokens,
    relay_config,
    relays,
    start_relay,
    tokens_of,
    with_relay,
)
from tests.lanes import LANES, on_lane

pytestmark = [pytest.mark.faults, pytest.mark.integration]

SOURCE = "fault-kill"
TOPICS = 5


def _plan(kills: int, rng: random.Random) -> list[str]:
    """Every third kill is the failpoint between ack and delete; the rest are random."""
    kinds = ["after_ack" if i % 3 == 1 else "random" for i in range(kills)]
    rng.shuffle(kinds)
    return kinds


def _claim_gaps(url: str, token: str) -> list[float]:
    """Seconds between consecutive claims of one process: its batch cycle."""
    rows = query(url, "SELECT min(extract(epoch FROM at))::float FROM fault_fence_events "
                 "WHERE kind = 'claim' AND token = ANY(%s) GROUP BY xid", (lane_tokens(token),))
    times = sorted(t for (t,) in rows)
    return [b - a for a, b in itertools.pairwise(times)]


def _claimed(url: str, seen: set[str], proc: RelayProc, kind: str, batch: int,
             found: list[str]) -> bool:
    """Whether the relay just started has claimed its `batch`-th batch; its token goes
    into `found`."""
    assert proc.alive() or kind == "after_ack", f"relay died\n{proc.tail()}"
    new = tokens_of(url, SOURCE) - seen
    assert len(new) <= 1, f"one process, one token (and its drain lane's): {new}"
    if not new:
        return False
    token = next(iter(new))
    claims = scalar(url, "SELECT count(DISTINCT xid) FROM fault_fence_events "
                    "WHERE kind = 'claim' AND token = ANY(%s)", (lane_tokens(token),))
    if claims >= batch:
        found.append(token)
        return True
    return False


def _in_flight(url: str, token: str) -> set[int]:
    return {i for (ids,) in query(url, "SELECT ids FROM relay_sessions "
                                  "WHERE lock_token = ANY(%s)", (lane_tokens(token),))
            for i in ids}


@pytest.mark.scenario("1-kill-loop")
@pytest.mark.parametrize("lane", LANES)
def test_kill_loop_loses_nothing_and_duplicates_only_what_was_in_flight(
    stack: StackInfo, fault_db: str, tmp_path: Path, spark: SparkSession, long_mode: bool,
    scenario: Scenario, lane: str,
) -> None:
    n = 200_000 if long_mode else 50_000
    planned = 40 if long_mode else 10
    if lane == "spark" and not long_mode:  # half of it: the control plane is the same
        n, planned = n // 2, planned // 2
    rng = random.Random(20_261_125)
    topics = [unique("kill") for _ in range(TOPICS)]
    create_topics(stack.kafka_bootstrap, dict.fromkeys(topics, 3))
    outbox = Outbox(fault_db)
    outbox.write(traffic(topics, n, per_tx=100, keys=40, value_bytes=120, seed=1))
    outbox.close()
    # About three batches per planned kill, so the drain outlasts the kills on the Spark
    # lane. The driver's producer is faster than that: one process may drain half the
    # backlog between its claim and its kill. So before each start the outbox holds at
    # least four rounds of batches: more than the two claims a kill waits for.
    batch_size = max(100, n // TOPICS // (3 * planned))
    floor = 4 * batch_size * TOPICS
    topped_up = 0
    config = on_lane(relay_config(fault_db, stack.kafka_bootstrap, tmp_path, topics=topics,
                                  source_name=SOURCE, relay={"batch_size": batch_size}), lane)
    scenario.update(topics=TOPICS, batch_size_per_topic=batch_size)

    kills: list[dict[str, Any]] = []
    in_flight: list[set[int]] = []
    marks: list[dict[tuple[str, int], int]] = []
    gaps: list[float] = []
    seen: set[str] = set()
    started = time.monotonic()
    with relays() as procs:
        for k, kind in enumerate(_plan(planned, rng)):
            remaining = outbox_count(fault_db)
            if remaining < floor:
                topped_up += 1
                outbox.write(traffic(topics, n // 5, per_tx=100, keys=40, value_bytes=120,
                                     seed=1 + topped_up, tag=f"more{topped_up}-"))
                remaining = outbox_count(fault_db)
            env = {"RELAY_FAILPOINTS": "after_ack"} if kind == "after_ack" else None
            proc = start_relay(config, tmp_path, f"kill-{k:02d}", env=env)
            procs.append(proc)
            # Random kills fall inside the 1st, 2nd or 3rd batch of the process (a
            # first batch also warms up the JVM), at a random point of its cycle.
            batch = 1 if kind == "after_ack" else rng.choice([1, 2, 2])
            found: list[str] = []
            wait_until(partial(_claimed, fault_db, seen, proc, kind, batch, found), 600,
                       f"relay {proc.name} to claim batch {batch}", diagnose=proc.tail)
            token = found[0]
            delay = 0.0
            if kind == "random":
                cycle = statistics.median(gaps) if gaps else 4.0
                delay = rng.uniform(0, min(20.0, cycle))
                time.sleep(delay)  # the fault's own timing, not a wait for a condition
                assert proc.alive(), f"relay died before its kill\n{proc.tail()}"
                code = proc.kill()
            else:
                code = proc.wait(600)
            assert code == -signal.SIGKILL, f"exit {code}\n{proc.tail()}"
            # What the dead process had claimed and not finished: its messages in flight.
            flight = _in_flight(fault_db, token)
            in_flight.append(flight)
            marks.append(high_watermarks(stack.kafka_bootstrap, topics))
            seen.add(token)
            gaps += _claim_gaps(fault_db, token)[1:]  # warmed-up cycles only
            kills.append({"kind": kind, "batch": batch, "after_claim_s": round(delay, 2),
                          "in_flight": len(flight), "outbox_before": remaining,
                          "outbox_after": outbox_count(fault_db)})

        # The rest in big batches: the faults are over, only the outcome counts now.
        final = start_relay(with_relay(config, batch_size=10_000), tmp_path, "final",
                            available_now=True)
        procs.append(final)
        code = final.wait(1200)
        assert code == 0, final.tail()
    drain_s = time.monotonic() - started
    outbox.close()

    records = read_all(stack.kafka_bootstrap, topics)
    v = verdict(outbox, records)
    # Which process appended each record: the one alive between two kills' watermarks.
    # Every copy of a message but its last was sent by a process that died before
    # deleting it: a duplicate caused by that process's kill, which must have had the
    # message in flight. A copy appended after the last kill is a duplicate without one.
    sent: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r in records:
        window = next((k for k, m in enumerate(marks) if r.offset < m[(r.topic, r.partition)]),
                      len(marks))
        sent[r.outbox_id].append((window, r.offset))
    stray: list[int] = []
    for kill in kills:
        kill["duplicated"] = 0
    for i, copies in sent.items():
        for window, _ in sorted(copies)[:-1]:
            if window == len(marks) or i not in in_flight[window]:
                stray.append(i)
            else:
                kills[window]["duplicated"] += 1
    # A message may arrive once more for each kill that found it in flight.
    over = [i for i, c in v.copies.items() if c > 1 + sum(i in f for f in in_flight)]
    ledger = ledger_entries(spark, config)
    ledger_ids = Counter(i for _, i, _ in ledger)
    owners = ownership(fault_db, config.relay.lock_timeout_s)
    scenario.update(
        v.figures(),
        faults_injected=len(kills),
        backlogs_written_again=topped_up,
        kills_random=sum(k["kind"] == "random" for k in kills),
        kills_after_ack=sum(k["kind"] == "after_ack" for k in kills),
        drain_s=round(drain_s, 1),
        in_flight_at_kills=sum(len(f) for f in in_flight),
        duplicates_per_kill=[k["duplicated"] for k in kills],
        ledger_rows=len(ledger),
        ledger_exact=set(ledger_ids) == set(outbox.written) and max(ledger_ids.values()) == 1,
        lock_takeovers_after_kills=len(owners.takeovers),
        per_kill=kills,
        notes=f"{len(kills)} SIGKILLs of the process group, "
              f"{sum(k['kind'] == 'after_ack' for k in kills)} of them at the after_ack "
              f"failpoint; duplicates per kill {[k['duplicated'] for k in kills]}, "
              "each within what that kill had in flight; ledger exact",
    )

    assert len(kills) >= (3 * planned // 4 if long_mode else planned), \
        f"only {len(kills)} of {planned} kills during the drain"
    v.assert_clean(max_duplicates=None)
    assert not stray, f"duplicated, not in flight at the kill after it: {sorted(stray)[:10]}"
    assert not over, f"more copies than kills that had them in flight: {over[:10]}"
    assert outbox_count(fault_db) == 0
    assert query(fault_db, "SELECT count(*) FROM relay_sessions")[0][0] == 0
    assert ledger_ids and max(ledger_ids.values()) == 1, "the ledger has each message once"
    assert set(ledger_ids) == set(outbox.written), "the ledger has every message"
    assert {o for _, _, o in ledger} == {"published"}
    assert not owners.unfenced, owners.unfenced[:5]
    assert not owners.live_takeovers, owners.live_takeovers[:5]
    assert not owners.stale_claims, owners.stale_claims[:5]



"""Scenarios 4 and 5: several relays on the same topics, and a relay whose lock is stolen
while it is frozen mid-write.

The test-only triggers (recorders.RECORDERS) record every change of a topic's owner and,
inside the very transaction that deletes outbox rows, who held the topic's lock. A
lock may only pass straight from one process to another once it has expired, and a
delete must always be done by the holder.
"""

from __future__ import annotations

import signal
import time
from functools import partial
from pathlib import Path

import pytest

from outbox_relay.stack import StackInfo
from tests.faults.conftest import Scenario
from tests.faults.freeze import freeze_in_flight
from tests.faults.infra import create_topics, outbox_count, query, unique, wait_until
from tests.faults.oracle import high_watermarks, read_all, verdict
from tests.faults.outbox_writer import Outbox, Refill, traffic
from tests.faults.recorders import ownership, quiesce, unfinished_claims
from tests.faults.relay_proc import (
    SAW_IT,
    RelayProc,
    relay_config,
    relays,
    sources_connected,
    start_relay,
    with_relay,
)
from tests.lanes import LANES, on_lane

pytestmark = [pytest.mark.faults, pytest.mark.integration]


@pytest.mark.scenario("4-racing-relays")
@pytest.mark.parametrize("lane", LANES)
def test_three_relays_racing_never_share_a_topic(
    stack: StackInfo, fault_db: str, tmp_path: Path, scenario: Scenario, long_mode: bool,
    lane: str,
) -> None:
    n = 60_000 if long_mode else 9_000
    topics = [unique("race") for _ in range(6)]
    create_topics(stack.kafka_bootstrap, dict.fromkeys(topics, 2))
    # One source name for all three: the fencing token must still tell them apart.
    base = on_lane(relay_config(fault_db, stack.kafka_bootstrap, tmp_path, topics=topics,
                                source_name="fault-race",
                                relay={"batch_size": 100, "lock_timeout_s": 10,
                                       "heartbeat_interval_s": 2}), lane)
    outbox = Outbox(fault_db)
    with relays() as procs:
        for i in range(3):
            config = with_relay(base, checkpoint_path=str(tmp_path / f"checkpoint-{i}"))
            procs.append(start_relay(config, tmp_path, f"relay-{i}"))
        wait_until(lambda: sources_connected(fault_db) == 3, 900, "three relays polling",
                   diagnose=lambda: "\n".join(p.tail(15) for p in procs))
        started = time.monotonic()
        outbox.write(traffic(topics, n, per_tx=20, keys=25, value_bytes=150, seed=4))
        wait_until(lambda: outbox_count(fault_db) == 0, 900, "the three relays to drain",
                   diagnose=lambda: "\n".join(p.tail(15) for p in procs))
        drained = time.monotonic()
        quiesce(fault_db)
        codes = [p.stop() for p in procs]
        logs = [p.tail() for p in procs]
    outbox.close()
    records = read_all(stack.kafka_bootstrap, topics)
    v = verdict(outbox, records)
    owners = ownership(fault_db, base.relay.lock_timeout_s)
    lock_events = query(fault_db, "SELECT count(*) FROM fault_lock_events")[0][0]
    per_owner = dict(query(fault_db, "SELECT token, count(DISTINCT xid) FROM fault_fence_events "
                           "WHERE kind = 'claim' GROUP BY token"))
    may_repeat = unfinished_claims(fault_db)
    scenario.update(
        v.figures(),
        faults_injected=0,
        relays=3,
        drain_s=round(drained - started, 1),
        lock_events=lock_events,
        owners=len(owners.owners),
        batches_per_relay=sorted(per_owner.values()),
        takeovers_of_expired_locks=len(owners.takeovers),
        takeovers_of_live_locks=len(owners.live_takeovers),
        unfenced_deletes=len(owners.unfenced),
        claims_racing_a_takeover=len(owners.stale_claims),
        notes=f"3 relays, one source name; {lock_events} lock events, "
              f"{len(owners.live_takeovers)} takeovers of a live lock, "
              f"{len(owners.unfenced)} unfenced deletes; batches per relay "
              f"{sorted(per_owner.values())}",
    )

    assert codes == [0, 0, 0], "\n".join(logs)
    assert not owners.live_takeovers, owners.live_takeovers[:5]
    assert not owners.unfenced, owners.unfenced[:5]
    assert not owners.stale_claims, owners.stale_claims[:5]
    assert len(owners.owners) >= 2, "the relays raced: more than one took locks"
    # Without a fault, a duplicate needs a lock that expired under a relay (a stall).
    v.assert_clean(max_duplicates=None)
    assert v.duplicated_ids <= may_repeat
    if not owners.takeovers:
        assert v.duplicates == 0


def _reclaimed(url: str, thief_prefix: str, ids: list[int], token: str) -> bool:
    """The thief took the lock and claimed the frozen relay's rows again."""
    return bool(query(url, """
        SELECT 1 FROM fault_fence_events
        WHERE kind = 'claim' AND token LIKE %s AND ids && %s::bigint[]
          AND seq > (SELECT coalesce(max(seq), 0) FROM fault_fence_events
                     WHERE kind = 'claim' AND token = %s)
    """, (thief_prefix + "%", ids, token)))


@pytest.mark.scenario("5-lock-theft")
@pytest.mark.parametrize("lane", LANES)
def test_frozen_relay_loses_its_lock_and_deletes_nothing_the_thief_reclaimed(
    stack: StackInfo, fault_db: str, tmp_path: Path, scenario: Scenario, long_mode: bool,
    lane: str,
) -> None:
    n = 40_000 if long_mode else 12_000
    topic = unique("theft")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    lock_timeout = 5.0
    # A full claim of 3,000 rows of 900 bytes is a Spark job on the Spark lane, and a
    # write of a fraction of a second by the driver's producer on the direct lane.
    base = on_lane(relay_config(fault_db, stack.kafka_bootstrap, tmp_path, topics=[topic],
                                relay={"batch_size": 3000, "lock_timeout_s": lock_timeout,
                                       "heartbeat_interval_s": 1}), lane)
    names = {"a": "fault-theft-a", "b": "fault-theft-b"}
    outbox = Outbox(fault_db)
    with relays() as procs:
        by_name: dict[str, RelayProc] = {}
        for name, source in names.items():
            config = with_relay(base, source_name=source,
                                checkpoint_path=str(tmp_path / f"checkpoint-{name}"))
            by_name[name] = start_relay(config, tmp_path, f"relay-{name}")
            procs.append(by_name[name])
        wait_until(lambda: sources_connected(fault_db) == 2, 900, "two relays polling",
                   diagnose=lambda: "\n".join(p.tail(15) for p in procs))
        started = time.monotonic()
        outbox.write(traffic([topic], n, per_tx=50, keys=20, value_bytes=900, seed=5))
        refill = Refill(outbox, [topic], n, seed=5)

        prefixes = {k: v + "@" for k, v in names.items()}
        # Best frozen while its records land; failing that, anywhere in its session.
        frozen = freeze_in_flight(
            fault_db, prefixes, by_name, refill, mid_write_tries=6,
            landed=lambda: sum(high_watermarks(stack.kafka_bootstrap, [topic]).values()))
        other = "b" if frozen.name == "a" else "a"
        victim, thief = by_name[frozen.name], by_name[other]
        try:
            wait_until(partial(_reclaimed, fault_db, prefixes[other], frozen.ids, frozen.token),
                       300, "the other relay to take the lock and re-claim", diagnose=thief.tail)
            # Frozen longer than the lock timeout; resumed while the thief is busy.
            while time.monotonic() < frozen.at + lock_timeout + 1:
                time.sleep(0.1)
        finally:
            frozen_s = time.monotonic() - frozen.at
            victim.signal(signal.SIGCONT)
        outbox.close()
        wait_until(lambda: outbox_count(fault_db) == 0, 900, "the drain to complete",
                   diagnose=lambda: "\n".join(p.tail(15) for p in procs))
        drained = time.monotonic()
        wait_until(lambda: any(s in victim.text() for s in SAW_IT), 120,
                   "the frozen relay to see it", diagnose=victim.tail)
        quiesce(fault_db)
        codes = [p.stop() for p in procs]
        logs = {p.name: p.text() for p in procs}
    records = read_all(stack.kafka_bootstrap, [topic])
    v = verdict(outbox, records)
    owners = ownership(fault_db, lock_timeout)
    takeover = [t for t in owners.takeovers if t[1] == frozen.token]
    # The frozen session never ended with a delete of its own; its rows were deleted by
    # the thief's transaction (a delete fenced by the thief's lock).
    stolen_deletes = query(fault_db, """
        SELECT count(*) FROM fault_fence_events e
        JOIN fault_fence_events d ON d.xid = e.xid AND d.kind = 'delete'
        WHERE e.kind = 'session_end' AND e.session_id = %s::uuid
    """, (frozen.session,))[0][0]
    may_repeat = unfinished_claims(fault_db)
    victim_log = logs[f"relay-{frozen.name}"]
    lost_lines = [ln for ln in victim_log.splitlines() if any(s in ln for s in SAW_IT)]
    scenario.update(
        v.figures(),
        faults_injected=1,
        backlogs_written_again=refill.count,
        frozen_s=round(frozen_s, 1),
        lock_timeout_s=lock_timeout,
        session_in_flight=len(frozen.ids),
        frozen_phase=frozen.phase,
        drain_s=round(drained - started, 1),
        takeover_after_s=round(takeover[0][3], 1) if takeover else None,
        deletes_by_frozen_session=stolen_deletes,
        unfenced_deletes=len(owners.unfenced),
        notes=f"SIGSTOP {frozen.phase} for {frozen_s:.0f} s (lock "
              f"timeout {lock_timeout:.0f} s) with {len(frozen.ids)} rows in flight; the lock "
              "passed after "
              f"{takeover[0][3] if takeover else float('nan'):.1f} s without renewal; "
              f"{stolen_deletes} deletes by the frozen session after it; its log: "
              f"{lost_lines[0].split(': ', 1)[-1][:80] if lost_lines else 'nothing'}",
    )

    assert codes == [0, 0], "\n".join(f"{k}: {t[-2000:]}" for k, t in logs.items())
    assert takeover, "the lock passed from the frozen relay to the other one"
    assert takeover[0][3] >= lock_timeout, "taken only after it expired"
    assert stolen_deletes == 0, "the frozen relay deleted its session's rows after losing the lock"
    assert not owners.unfenced, owners.unfenced[:5]
    assert not owners.stale_claims, owners.stale_claims[:5]
    assert not owners.live_takeovers, owners.live_takeovers[:5]
    assert lost_lines, "the frozen relay's log says it lost the lock or its delete"
    v.assert_clean(max_duplicates=None)
    assert v.duplicated_ids <= may_repeat, "duplicates only from the fenced-off session"

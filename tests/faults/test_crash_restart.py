"""Scenario 11 (issue 52): a relay killed with SIGKILL under a steady trickle and started
again at once, as a supervisor, Kubernetes or a Databricks continuous job does, on the
shipped profile (lock timeout 60 s).

The dead process's topic locks are fresh when the new one starts: before issue 52 it
waited the lock timeout for them (taken 59.9 s after the restart, the oldest waiting
message delivered after 71.8 s). Its holder is certainly gone (its liveness connection
ended with it, docs/design.md, invariant 3), so the new process takes them over in its
first lock statement, as soon as it is up.

What it asserts is that takeover. The time from the restart to the oldest message's
delivery is recorded (reports/faults.md) against the issue's 15 s, but not asserted:
it is the relay's cold start (JVM, SparkSession, the first Spark write), which a
loaded machine stretches far past it, with or without this change.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path

import pytest

from outbox_relay.stack import StackInfo
from tests.faults.conftest import Scenario
from tests.faults.infra import create_topics, outbox_count, query, scalar, unique, wait_until
from tests.faults.oracle import read_all, verdict
from tests.faults.outbox_writer import Outbox
from tests.faults.recorders import ownership, quiesce, unfinished_claims
from tests.faults.relay_proc import RelayProc, lane_tokens, relays, start_relay, tokens_of
from tests.faults.trickle import Trickle, shipped_config

pytestmark = [pytest.mark.faults, pytest.mark.integration]

SOURCE = "fault-crash"
# The issue's bound, from the restart to the delivery of the oldest waiting message, on
# a quiet machine (recorded, see above).
RESUME_BOUND_S = 15.0
# From the new process's registration (the end of its wiring, just before its first
# round) to its first lock statement: a round's set-up, not a lock timeout.
FIRST_LOCK_AFTER_REGISTRATION_S = 10.0


def _db_now(url: str) -> datetime:
    return scalar(url, "SELECT clock_timestamp() AT TIME ZONE 'UTC'")


def _steady(url: str, proc: RelayProc, seen: set[str]) -> str:
    """Waits until the relay just started has finished a few rounds; returns its token."""
    found: list[str] = []

    def deleting() -> bool:
        assert proc.alive(), f"relay died\n{proc.tail()}"
        new = tokens_of(url, SOURCE) - seen
        if not new:
            return False
        token = next(iter(new))
        deletes = scalar(url, "SELECT count(*) FROM fault_fence_events "
                         "WHERE kind = 'delete' AND holder = ANY(%s)", (lane_tokens(token),))
        if deletes >= 5:
            found.append(token)
        return bool(found)

    wait_until(deleting, 600, f"{proc.name} to deliver", interval_s=0.2, diagnose=proc.tail)
    return found[0]


def _kill_holding_a_lock(url: str, proc: RelayProc, token: str) -> list[str]:
    """SIGKILLs the whole process group as soon as it holds a topic lock; returns the
    topics its tokens still hold once it is dead (fresh locks of a dead holder)."""
    tokens = lane_tokens(token)
    held = "SELECT topic FROM kafka_topic_info WHERE locked_by = ANY(%s) ORDER BY topic"
    wait_until(lambda: bool(query(url, held, (tokens,))), 120, f"{proc.name} to hold a lock",
               interval_s=0.005, diagnose=proc.tail)
    proc.kill()
    return [t for (t,) in query(url, held, (tokens,))]


@pytest.mark.scenario("11-crash-restart")
def test_a_relay_restarted_after_sigkill_resumes_without_waiting_for_the_lock_timeout(
    stack: StackInfo, fault_db: str, tmp_path: Path, scenario: Scenario,
) -> None:
    topics = [unique("crash") for _ in range(3)]
    create_topics(stack.kafka_bootstrap, dict.fromkeys(topics, 3))
    config = shipped_config(fault_db, stack.kafka_bootstrap, tmp_path, topics=topics,
                            source_name=SOURCE)
    lock_timeout = config.relay.lock_timeout_s
    assert lock_timeout == 60, "the shipped profile's lock timeout"
    outbox = Outbox(fault_db)
    seen: set[str] = set()
    with relays() as procs, Trickle(outbox, topics, rate=200, per_tx=10) as trickle:
        proc = start_relay(config, tmp_path, "relay-0")
        procs.append(proc)
        for attempt in range(1, 4):
            dead = _steady(fault_db, proc, seen)
            seen.add(dead)
            held = _kill_holding_a_lock(fault_db, proc, dead)
            restart_db = _db_now(fault_db)
            oldest = scalar(fault_db, "SELECT min(id) FROM kafka_messages")
            restarted = time.monotonic()
            load = os.getloadavg()[0]
            proc = start_relay(config, tmp_path, f"relay-{attempt}")
            procs.append(proc)
            if held:  # the kill left fresh locks behind: the case of the issue
                break
        assert held, "three kills, none while the relay held a lock"
        assert oldest is not None, "messages were waiting at the restart"
        wait_until(lambda: not query(fault_db, "SELECT 1 FROM kafka_messages WHERE id = %s",
                                     (oldest,)),
                   3 * lock_timeout, "the oldest waiting message to be delivered",
                   interval_s=0.05, diagnose=proc.tail)
        resume_s = time.monotonic() - restarted
        new = next(iter(tokens_of(fault_db, SOURCE) - seen))
        # While it runs: a process that stops forgets its registration.
        registered_s = scalar(fault_db, "SELECT extract(epoch FROM min(registered_at) "
                              "AT TIME ZONE 'UTC' - %s)::float FROM relay_lock_holders "
                              "WHERE lock_token = ANY(%s)", (restart_db, lane_tokens(new)))
        time.sleep(3)  # the trickle's own timing: more traffic through the new process
        trickle.stop()
        wait_until(lambda: outbox_count(fault_db) == 0, 600, "the drain", diagnose=proc.tail)
        quiesce(fault_db)
        code = proc.stop()
        log = proc.tail()
    outbox.close()
    events = query(fault_db, """
        SELECT topic, old_owner = ANY(%(dead)s),
               extract(epoch FROM at - %(restart)s)::float,
               extract(epoch FROM at - old_locked_at)::float
        FROM fault_lock_events
        WHERE new_owner = ANY(%(new)s) ORDER BY seq
    """, {"dead": lane_tokens(dead), "new": lane_tokens(new), "restart": restart_db})
    first_lock_s = events[0][2] if events else None
    takeovers = {t: (after, age) for t, from_dead, after, age in events if from_dead}
    first_delete_s = scalar(fault_db, """
        SELECT extract(epoch FROM min(at) - %s)::float FROM fault_fence_events
        WHERE kind = 'delete' AND holder = ANY(%s)
    """, (restart_db, lane_tokens(new)))
    records = read_all(stack.kafka_bootstrap, topics)
    v = verdict(outbox, records)
    owners = ownership(fault_db, lock_timeout)
    may_repeat = unfinished_claims(fault_db)
    took = max((after for after, _ in takeovers.values()), default=None)
    gone = {t for t, old, _, _ in owners.gone_takeovers if old in lane_tokens(dead)}
    scenario.update(
        v.figures(),
        faults_injected=1,
        kills=attempt,
        lock_timeout_s=lock_timeout,
        locks_left_by_the_kill=len(held),
        restart_to_registered_s=_round(registered_s),
        restart_to_first_lock_s=_round(first_lock_s),
        restart_to_takeover_s=_round(took),
        restart_to_first_delete_s=_round(first_delete_s),
        restart_to_oldest_delivered_s=round(resume_s, 1),
        resume_within_issue_bound=resume_s <= RESUME_BOUND_S,
        load_at_restart=round(load, 1),
        notes=f"SIGKILL of the group at 200 msg/s over 3 topics (shipped profile, lock "
              f"timeout {lock_timeout:.0f} s) with {len(held)} lock(s) held, restarted at "
              f"once: wired {_round(registered_s)} s after the restart, first lock "
              f"statement {_round(first_lock_s)} s, which took the dead holder's locks "
              f"(gone, not expired); first delete {_round(first_delete_s)} s; oldest "
              f"waiting message delivered after {resume_s:.1f} s (the issue's bound "
              f"{RESUME_BOUND_S:.0f} s; JVM, Spark start-up and the first write included; "
              f"load average {load:.1f} on {os.cpu_count()} cores at the restart)",
    )
    print(f"kills={attempt} held={held} takeovers={takeovers} registered_s={registered_s} "
          f"first_lock_s={first_lock_s} first_delete_s={first_delete_s} "
          f"resume_s={resume_s:.1f}")

    assert code == 0, log
    assert set(takeovers) == set(held), f"the new relay took every lock the dead one left: " \
                                        f"{takeovers} of {held}"
    # Taken over because the holder was gone, not because its lock expired, and in the
    # new process's first lock statement.
    assert gone == set(held), owners.takeovers
    assert all(age < lock_timeout for _, age in takeovers.values()), takeovers
    assert first_lock_s is not None and took is not None and took - first_lock_s < 1.0
    assert registered_s is not None
    assert first_lock_s - registered_s < FIRST_LOCK_AFTER_REGISTRATION_S, (
        f"first lock {first_lock_s:.1f} s after the restart, wired at {registered_s:.1f} s")
    v.assert_clean(max_duplicates=None)
    assert v.duplicated_ids <= may_repeat, "duplicates only from the killed relay's sessions"
    assert not owners.unfenced, owners.unfenced[:5]
    assert not owners.stale_claims, owners.stale_claims[:5]
    assert not owners.live_takeovers, owners.live_takeovers[:5]


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)

"""Scenarios 12 and 13 (issue 52): what counts as a holder that is certainly gone.

12: a holder frozen (SIGSTOP) past several heartbeats but within the lock timeout keeps
its connections, so it is alive: the other relay waits, and after SIGCONT the frozen
one finishes its own batch. Nothing is sent twice.

13: the server drops the holder's liveness connection (`pg_terminate_backend`) while
the process lives. Alone, the relay reconnects it under the same key and goes on. With
a rival and the holder frozen, its locks are takeable at once: the rival takes the
topic and claims the rows again; once resumed, the holder finds its lock lost (or, frozen
inside its delete's transaction, its delete failed), deletes nothing it had claimed
(fenced), and reconnects. Only duplicates, never a loss or a
reordering (docs/design.md, invariant 3).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from outbox_relay.stack import StackInfo
from outbox_relay.wiring import process_token
from tests.faults.conftest import Scenario
from tests.faults.freeze import freeze_in_flight
from tests.faults.infra import create_topics, outbox_count, query, scalar, unique, wait_until
from tests.faults.oracle import read_all, verdict
from tests.faults.outbox_writer import Outbox, Refill, traffic
from tests.faults.recorders import ownership, quiesce, unfinished_claims
from tests.faults.relay_proc import (
    SAW_IT,
    RelayProc,
    lane_tokens,
    relay_config,
    relays,
    sources_connected,
    start_relay,
    tokens_of,
    with_relay,
)
from tests.faults.trickle import Trickle

pytestmark = [pytest.mark.faults, pytest.mark.integration]

# A relay's liveness connection: the backend that holds its holder key (outbox_relay/schemas/0018).
LIVENESS_BACKEND = """
SELECT l.pid FROM relay_lock_holders h
JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
 AND l.classid = relay_holder_lock_class()::oid AND l.objid = h.holder_key::oid
WHERE h.lock_token = %s
"""


def _liveness_pid(url: str, token: str) -> int | None:
    rows = query(url, LIVENESS_BACKEND, (token,))
    return int(rows[0][0]) if rows else None


def _deletes_by_session(url: str, session: str) -> int:
    """Deletes of outbox rows in the transaction that ended `session` (none if fenced)."""
    return int(scalar(url, """
        SELECT count(*) FROM fault_fence_events e
        JOIN fault_fence_events d ON d.xid = e.xid AND d.kind = 'delete'
        WHERE e.kind = 'session_end' AND e.session_id = %s::uuid
    """, (session,)))


@pytest.mark.scenario("12-frozen-within-lock-timeout")
def test_a_relay_frozen_within_the_lock_timeout_keeps_its_lock(
    stack: StackInfo, fault_db: str, tmp_path: Path, scenario: Scenario,
) -> None:
    topic = unique("frozen")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    lock_timeout, beat, freeze_s = 20.0, 1.0, 8.0
    # Frozen inside its delete's transaction, it keeps that transaction as long as the
    # server lets it idle: here, as long as the lock timeout allows (unset, half of it).
    base = relay_config(fault_db, stack.kafka_bootstrap, tmp_path, topics=[topic],
                        relay={"batch_size": 3000, "lock_timeout_s": lock_timeout,
                               "heartbeat_interval_s": beat},
                        postgres={"idle_in_transaction_timeout_ms": int(lock_timeout * 950)})
    names = {"a": "fault-frozen-a", "b": "fault-frozen-b"}
    outbox = Outbox(fault_db)
    with relays() as started:
        procs = {k: start_relay(with_relay(base, source_name=v,
                                           checkpoint_path=str(tmp_path / f"checkpoint-{k}")),
                                tmp_path, f"relay-{k}") for k, v in names.items()}
        started += procs.values()
        wait_until(lambda: sources_connected(fault_db) == 2, 900, "two relays polling",
                   diagnose=lambda: "\n".join(p.tail(15) for p in started))
        outbox.write(traffic([topic], 12_000, per_tx=50, keys=20, value_bytes=900, seed=12))
        refill = Refill(outbox, [topic], 12_000, seed=12)
        prefixes = {k: v + "@" for k, v in names.items()}
        name, token, session, ids, _, frozen = freeze_in_flight(fault_db, prefixes, procs, refill)
        outbox.close()
        try:
            time.sleep(freeze_s)  # the fault itself: frozen past 8 heartbeats
            held_while_frozen = scalar(fault_db, "SELECT locked_by FROM kafka_topic_info "
                                       "WHERE topic = %s", (topic,))
        finally:
            procs[name].signal(signal.SIGCONT)
        frozen_s = time.monotonic() - frozen
        wait_until(lambda: outbox_count(fault_db) == 0, 900, "the drain",
                   diagnose=lambda: "\n".join(p.tail(15) for p in started))
        quiesce(fault_db)
        codes = [p.stop() for p in procs.values()]
        logs = {k: p.text() for k, p in procs.items()}
    v = verdict(outbox, read_all(stack.kafka_bootstrap, [topic]))
    owners = ownership(fault_db, lock_timeout)
    lost = [t for t in owners.takeovers if t[1] in lane_tokens(process_token(token))]
    deletes = _deletes_by_session(fault_db, session)
    scenario.update(
        v.figures(), faults_injected=1, frozen_s=round(frozen_s, 1), lock_timeout_s=lock_timeout,
        heartbeat_interval_s=beat, session_in_flight=len(ids), takeovers_of_frozen=len(lost),
        deletes_by_frozen_session=deletes, backlogs_written_again=refill.count,
        notes=f"SIGSTOP for {frozen_s:.1f} s ({frozen_s / beat:.0f} heartbeats, lock timeout "
              f"{lock_timeout:.0f} s) with {len(ids)} rows in flight; the other relay took "
              f"{len(lost)} of its locks; the frozen session deleted its rows "
              f"({deletes} delete) after SIGCONT",
    )
    print(f"frozen {name} {frozen_s:.1f}s, held by {held_while_frozen}; takeovers {lost}; "
          f"deletes by its session {deletes}; duplicates {v.duplicates}")

    assert codes == [0, 0], "\n".join(f"{k}: {t[-2000:]}" for k, t in logs.items())
    assert held_while_frozen == token, "the frozen relay kept its lock while frozen"
    assert not lost, f"no takeover of a frozen, live holder: {lost}"
    assert "lock lost" not in logs[name]
    assert deletes >= 1, "after SIGCONT the frozen relay finished its own session"
    v.assert_clean(max_duplicates=0)
    assert not owners.unfenced and not owners.stale_claims and not owners.live_takeovers


@pytest.mark.scenario("13-liveness-connection-dropped")
def test_a_dropped_liveness_connection_is_fenced_and_reconnected(
    stack: StackInfo, fault_db: str, tmp_path: Path, scenario: Scenario,
) -> None:
    trickled, theft = [unique("drop"), unique("drop")], unique("drop-theft")
    create_topics(stack.kafka_bootstrap, {**dict.fromkeys(trickled, 2), theft: 2})
    lock_timeout = 30.0
    base = relay_config(fault_db, stack.kafka_bootstrap, tmp_path, topics=[*trickled, theft],
                        relay={"batch_size": 3000, "lock_timeout_s": lock_timeout,
                               "heartbeat_interval_s": 1})
    names = {"a": "fault-drop-a", "b": "fault-drop-b"}
    prefixes = {k: v + "@" for k, v in names.items()}
    outbox = Outbox(fault_db)
    figures: dict[str, object] = {}
    with relays() as started, Trickle(outbox, trickled, rate=100) as trickle:
        procs: dict[str, RelayProc] = {}

        def launch(k: str) -> None:
            procs[k] = start_relay(with_relay(base, source_name=names[k], checkpoint_path=str(
                tmp_path / f"checkpoint-{k}")), tmp_path, f"relay-{k}")
            started.append(procs[k])

        # Alone: the server drops the relay's liveness connection; it reconnects and goes on.
        launch("a")
        wait_until(lambda: bool(tokens_of(fault_db, names["a"])), 900, "relay a to claim",
                   diagnose=procs["a"].tail)
        a_token = next(iter(tokens_of(fault_db, names["a"])))
        first = _liveness_pid(fault_db, a_token)
        assert first is not None, "a running relay holds its liveness key on a backend"
        scalar(fault_db, "SELECT pg_terminate_backend(%s)", (first,))
        dropped = time.monotonic()
        after = scalar(fault_db, "SELECT max(id) FROM kafka_messages")
        wait_until(lambda: (p := _liveness_pid(fault_db, a_token)) is not None and p != first,
                   60, "relay a to reconnect its liveness connection", interval_s=0.05,
                   diagnose=procs["a"].tail)
        figures["reconnected_after_s"] = round(time.monotonic() - dropped, 1)
        wait_until(lambda: not query(fault_db, "SELECT 1 FROM kafka_messages WHERE id <= %s",
                                     (after,)), 120, "relay a to go on delivering",
                   diagnose=procs["a"].tail)
        assert procs["a"].alive()

        # Frozen beside a rival: its dropped liveness makes its locks takeable at once.
        launch("b")
        wait_until(lambda: sources_connected(fault_db) == 2, 900, "two relays polling",
                   diagnose=lambda: "\n".join(p.tail(15) for p in started))
        outbox.write(traffic([theft], 9_000, per_tx=50, keys=20, value_bytes=900, seed=13))
        refill = Refill(outbox, [theft], 9_000, seed=13)
        name, token, session, ids, _, frozen = freeze_in_flight(fault_db, prefixes, procs, refill)
        other = "b" if name == "a" else "a"
        try:
            pid = _liveness_pid(fault_db, token)
            assert pid is not None
            scalar(fault_db, "SELECT pg_terminate_backend(%s)", (pid,))
            terminated = time.monotonic()
            wait_until(lambda: _reclaimed(fault_db, prefixes[other], ids, session), 120,
                       "the rival to take the lock and claim the rows again",
                       interval_s=0.05, diagnose=procs[other].tail)
            figures["rival_reclaimed_after_s"] = round(time.monotonic() - terminated, 1)
        finally:
            procs[name].signal(signal.SIGCONT)
        figures["frozen_s"] = round(time.monotonic() - frozen, 1)
        wait_until(lambda: any(s in procs[name].text() for s in SAW_IT), 120,
                   "the holder to see it", diagnose=procs[name].tail)
        wait_until(lambda: _liveness_pid(fault_db, token) not in (None, pid), 60,
                   "the holder to reconnect its liveness", diagnose=procs[name].tail)
        trickle.stop()
        wait_until(lambda: outbox_count(fault_db) == 0, 900, "the drain",
                   diagnose=lambda: "\n".join(p.tail(15) for p in started))
        quiesce(fault_db)
        codes = [p.stop() for p in procs.values()]
        logs = {k: p.text() for k, p in procs.items()}
    outbox.close()
    v = verdict(outbox, read_all(stack.kafka_bootstrap, [*trickled, theft]))
    owners = ownership(fault_db, lock_timeout)
    deletes = _deletes_by_session(fault_db, session)
    gone = [t for t in owners.gone_takeovers if t[1] == token]
    may_repeat = unfinished_claims(fault_db)
    scenario.update(
        v.figures(), faults_injected=2, lock_timeout_s=lock_timeout, **figures,
        session_in_flight=len(ids), takeovers_of_dropped_holder=len(gone),
        deletes_by_fenced_session=deletes, backlogs_written_again=refill.count,
        notes=f"pg_terminate_backend of the liveness connection: alone, reconnected after "
              f"{figures['reconnected_after_s']} s and went on; frozen beside a rival, its "
              f"lock was taken and its {len(ids)} rows claimed again "
              f"{figures['rival_reclaimed_after_s']} s after (lock timeout "
              f"{lock_timeout:.0f} s); {deletes} deletes by its fenced session",
    )
    print(f"figures={figures} gone takeovers={gone} deletes={deletes} dup={v.duplicates}")

    assert codes == [0, 0], "\n".join(f"{k}: {t[-2000:]}" for k, t in logs.items())
    assert gone and all(age < lock_timeout for *_, age in gone), owners.takeovers
    assert deletes == 0, "the fenced holder deleted rows after losing its lock"
    v.assert_clean(max_duplicates=None)
    assert v.duplicated_ids <= may_repeat, "duplicates only from the fenced session"
    assert not owners.unfenced, owners.unfenced[:5]
    assert not owners.stale_claims, owners.stale_claims[:5]
    assert not owners.live_takeovers, owners.live_takeovers[:5]


def _reclaimed(url: str, prefix: str, ids: list[int], session: str) -> bool:
    """The rival claimed some of `session`'s rows again, after that session."""
    return bool(query(url, """
        SELECT 1 FROM fault_fence_events
        WHERE kind = 'claim' AND token LIKE %s AND ids && %s::bigint[]
          AND seq > (SELECT min(seq) FROM fault_fence_events WHERE session_id = %s::uuid)
    """, (prefix + "%", ids, session)))

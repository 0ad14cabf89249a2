"""Scenario 7: transactions that hold lower ids open while later ones commit and are sent.

Ids come from a sequence, so a transaction that commits late brings a lower id after
higher ids were relayed. It must still be delivered (docs/design.md, invariant 5, late
commits), and invariant 2 (per-key order) must hold for every pair of transactions that
were serialised (one committed before the other began) on the same key. This runs once
per claim mode the relay offers.
"""

from __future__ import annotations

import random
import time
import typing
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from outbox_relay.config import RelaySettings
from outbox_relay.stack import StackInfo
from tests.faults.conftest import Scenario
from tests.faults.infra import create_topics, outbox_count, query, unique, wait_until
from tests.faults.oracle import read_all, verdict
from tests.faults.outbox_writer import Msg, OpenTx, Outbox
from tests.faults.recorders import quiesce
from tests.faults.relay_proc import relay_config, relays, sources_connected, start_relay

pytestmark = [pytest.mark.faults, pytest.mark.integration]

KEYS = [b"a", b"b", b"c", b"d"]


def claim_modes() -> list[tuple[str, dict[str, Any]]]:
    """Every claim mode the relay's settings offer (a setting named *claim* or *cursor*)."""
    for name, info in RelaySettings.model_fields.items():
        if "claim" not in name and "cursor" not in name:
            continue
        choices = typing.get_args(info.annotation)
        if choices and all(isinstance(c, str) for c in choices):
            return [(f"{name}={c}", {name: c}) for c in choices]
        if info.annotation is bool:
            return [(f"{name}={v}", {name: v}) for v in (False, True)]
    return [("lowest-ids", {})]


MODES = claim_modes()


@pytest.mark.scenario("7-late-commit")
@pytest.mark.parametrize("mode", [m for _, m in MODES], ids=[n for n, _ in MODES])
def test_late_commits_are_delivered_and_serialised_transactions_keep_key_order(
    stack: StackInfo, fault_db: str, tmp_path: Path, scenario: Scenario, long_mode: bool,
    mode: dict[str, Any],
) -> None:
    held_n = 10 if long_mode else 3
    rng = random.Random(7)
    topic = unique("late")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    config = relay_config(fault_db, stack.kafka_bootstrap, tmp_path, topics=[topic],
                          source_name="fault-late", relay={"batch_size": 50, **mode})
    outbox = Outbox(fault_db)
    counter = iter(range(10**9))

    def serialised(txs: int) -> list[int]:
        return outbox.write([[Msg(topic, rng.choice(KEYS), f"m{next(counter)}".encode())
                              for _ in range(rng.randint(1, 4))] for _ in range(txs)])

    def drained() -> None:
        wait_until(lambda: outbox_count(fault_db) == 0, 600, "the visible rows to be relayed",
                   diagnose=proc.tail)

    held: list[tuple[Any, OpenTx, list[int]]] = []
    sent_past: list[int] = []
    with relays() as procs:
        proc = start_relay(config, tmp_path, "relay")
        procs.append(proc)
        wait_until(lambda: sources_connected(fault_db) == 1, 600, "the relay polling",
                   diagnose=proc.tail)
        started = time.monotonic()
        serialised(20)
        for _ in range(held_n):
            conn = psycopg2.connect(fault_db)
            tx = outbox.begin_on(conn)
            ids = tx.add([Msg(topic, k, f"late{next(counter)}".encode())
                          for k in rng.sample(KEYS, 2)])
            held.append((conn, tx, ids))
            sent_past += serialised(15)
        drained()
        # Everything committed so far went out while the held transactions stayed open.
        relayed_while_held = query(fault_db, "SELECT count(*) FROM fault_fence_events "
                                   "WHERE kind = 'claim'")[0][0]
        for idx in rng.sample(range(held_n), held_n):
            conn, tx, _ = held[idx]
            conn.commit()
            tx.committed()
            conn.close()
            serialised(10)  # serialised after the late commit: must follow it per key
            drained()
        drain_s = time.monotonic() - started
        quiesce(fault_db)
        code = proc.stop()
        log = proc.text()
    late_ids = sorted(i for _, _, ids in held for i in ids)
    records = read_all(stack.kafka_bootstrap, [topic])
    v = verdict(outbox, records)
    overtaken = sum(1 for i in sent_past if i > min(late_ids))
    scenario.update(
        v.figures(),
        faults_injected=held_n,
        claim_modes=[n for n, _ in MODES],
        late_messages=len(late_ids),
        ids_sent_past_a_late_one=overtaken,
        drain_s=round(drain_s, 1),
        notes=f"{held_n} transactions held open while {len(sent_past)} later messages were "
              f"relayed, then committed in random order; claim modes: "
              f"{', '.join(n for n, _ in MODES)}",
    )

    assert code == 0, log[-3000:]
    assert relayed_while_held > 0 and overtaken > 0, "later ids went out before the late ones"
    v.assert_clean(max_duplicates=0)
    assert set(late_ids) <= set(v.copies), "every late commit was delivered"

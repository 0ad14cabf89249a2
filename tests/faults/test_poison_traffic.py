"""Scenario 6: poison messages mixed into healthy traffic, under both policies at once.

Oversize messages (the topic's max.message.bytes is 10 000) and a missing topic are
caught before sending; an illegal topic name too; a keyless record on a compacted topic
is refused only by the broker, so the relay must isolate it inside a failed write.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from relay.stack import StackInfo
from tests.faults.conftest import Scenario
from tests.faults.harness import (
    Msg,
    Outbox,
    create_topics,
    ledger_entries,
    quiesce,
    read_all,
    relay_config,
    relays,
    start_relay,
    unique,
)
from tests.faults.poison import (
    PARK_RULE,
    Case,
    check,
    expectations,
    mixed_traffic,
    run_until_settled,
)

pytestmark = [pytest.mark.faults, pytest.mark.integration]

LIMIT = 10_000


def _poison(case: Case, n: int) -> Msg:
    if case.what == "oversize":
        key = b"k2" if n == 0 else b"k4"
        return Msg(case.topic, key, random.Random(n).randbytes(2 * LIMIT))
    assert case.what == "keyless on a compacted topic"
    return Msg(case.topic, None, f"keyless {n}".encode())


def _cases(caught: str) -> list[Case]:
    if caught == "by the broker":
        return [Case(unique(f"f{p}-compact"), p, what="keyless on a compacted topic")
                for p in ("park", "block")]
    return [Case(unique(f"f{p}-big"), p, what="oversize") for p in ("park", "block")] + [
        Case(unique(f"f{p}-missing"), p, whole_topic=True, what="missing topic")
        for p in ("park", "block")
    ] + [
        Case(unique(f"f{p}-bad name!"), p, whole_topic=True, what="illegal name")
        for p in ("park", "block")
    ]


@pytest.mark.scenario("6-poison")
@pytest.mark.parametrize("caught", ["before sending", "by the broker"])
def test_poison_is_parked_or_blocks_its_topic_while_healthy_traffic_flows(
    stack: StackInfo, fault_db: str, tmp_path: Path, spark: SparkSession, scenario: Scenario,
    long_mode: bool, caught: str,
) -> None:
    healthy = [unique("healthy"), unique("healthy")]
    cases = _cases(caught)
    create_topics(stack.kafka_bootstrap, dict.fromkeys(healthy, 2))
    create_topics(stack.kafka_bootstrap, {c.topic: 1 for c in cases if c.what == "oversize"},
                  **{"max.message.bytes": str(LIMIT)})
    create_topics(stack.kafka_bootstrap, {c.topic: 1 for c in cases if "compacted" in c.what},
                  **{"cleanup.policy": "compact"})
    outbox = Outbox(fault_db)
    per_topic = 1000 if long_mode else 200
    mixed_traffic(outbox, healthy, cases, _poison, per_topic=per_topic, keys=6, seed=6)
    outbox.close()
    exp = expectations(outbox, healthy, cases)
    config = relay_config(fault_db, stack.kafka_bootstrap, tmp_path, source_name="fault-poison",
                          relay={"batch_size": 100, "topic_rules": [PARK_RULE]})
    with relays() as procs:
        proc = start_relay(config, tmp_path, "relay")
        procs.append(proc)
        started = time.monotonic()
        run_until_settled(fault_db, exp, proc)
        drain_s = time.monotonic() - started
        quiesce(fault_db)
        code = proc.stop()
        log = proc.text()
    topics = [*healthy, *(c.topic for c in cases if not c.whole_topic)]
    records = read_all(stack.kafka_bootstrap, topics)
    result = check(fault_db, outbox, records, cases, exp, "fault-poison",
                   ledger_entries(spark, config), config.relay.batch_size)
    scenario.update(
        result.figures,
        faults_injected=sum(len(c.poison) or 1 for c in cases),
        drain_s=round(drain_s, 1),
        cases={f"{c.policy}: {c.what}": (c.poison or "whole topic") for c in cases},
        notes=f"{len(exp.parked)} parked (poison and the later messages of its key), "
              f"{len(exp.remaining)} held by block; "
              f"{result.figures['sent_ahead_of_a_block']} records sent ahead of a block "
              "(acknowledged in a failed write, kept in the outbox)",
    )

    assert code == 0, log[-3000:]
    assert not result.problems, "\n".join(result.problems)

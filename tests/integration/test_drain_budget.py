"""An available-now drain's time budget (`relay.available_now_budget_s`, `--time-budget-s`),
on the real stack.

A backlog far larger than the budget allows: past the budget the drain claims nothing
new in any lane, finishes the rounds in flight (their deletes and releases), copies the
ledger as a drain does at its end, and exits LEFT_OVER, soon after the budget and long
before the backlog would have drained. What left the outbox is read back from Kafka.
The same when the budget runs out while the drain lanes work, and through the flag, as a
spark-submit whose budget counts from its start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from outbox_relay.app import print_summary
from outbox_relay.config import Config
from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from outbox_relay.stream.lanes import LANE_THREAD
from outbox_relay.stream.runner import RunResult
from outbox_relay.stream.stop import StopSignal
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    every_key_shape,
    insert,
    order_report,
    query,
    unique,
    wait_for,
)
from tests.integration.process import kill_group, spark_submit, write_profile

pytestmark = pytest.mark.integration

BUDGET_S = 10.0
# From the end of the rounds in flight at the budget to the exit: the query's stop
# between two batches and the end's ledger copy (delta-rs), with room for a loaded machine.
END_S = 15.0
# A claim that read the stop flag just before the budget set it.
RACE_S = 0.5
# 9,000 rows in claims of 20 a topic through Spark: 37-90 s of drain without a budget.
PER_TOPIC = 3000
BATCH = 20

# The flag's budget for a spark-submit: the JVM and the session start inside it. Its
# backlog is larger, so that even a quiet machine does not drain it within (10,000 rows
# a topic were once all but drained: 29,840 of 30,000).
PROCESS_BUDGET_S = 45.0
PROCESS_PER_TOPIC = 20_000

LOCKED = "SELECT topic, locked_by FROM kafka_topic_info WHERE locked_by IS NOT NULL"
STAGED = "SELECT count(*) FROM relay_ledger_staging"


@dataclass
class Ending:
    """How a budgeted in-process drain ended, from the database, Kafka, the Delta ledger
    and the relay's own timeline (its log: when the budget ran out, each round's phases)."""

    result: RunResult
    began: float  # time.time() around the run
    ended: float
    written: dict[int, Msg]
    gone: set[int]  # ids that left the outbox
    received: Counter[int]  # ids read back from Kafka
    order: tuple[int, int]  # (inversions, keys over several partitions)
    ledger: Counter[int]
    spent: float  # when the budget ran out
    claims: list[tuple[float, str]]  # (start, thread) of every claim
    rounds_end: float  # when the last round in flight ended

    def check(self, url: str) -> None:
        late = [(round(at - self.spent, 3), t) for at, t in self.claims if at > self.spent + RACE_S]
        print(f"budget ran out {self.spent - self.began:.1f} s after the start, the rounds in "
              f"flight ended {self.rounds_end - self.spent:.1f} s later, the run "
              f"{self.ended - self.rounds_end:.1f} s after them; claims by "
              f"{sorted({t for _, t in self.claims})}, after the budget: {late}")
        print(f"exit {self.result.exit_code}, {self.ended - self.began:.1f} s; {len(self.gone)} "
              f"of {len(self.written)} rows left the outbox in {self.result.stats.batches} "
              f"rounds; {len(self.received)} ids in Kafka ({sum(self.received.values())} "
              f"records); {sum(self.ledger.values())} in the ledger; order {self.order}")
        assert self.result.exit_code == ExitCode.LEFT_OVER
        assert self.gone and len(self.gone) < len(self.written), "part of the backlog, not all"
        # It claimed nothing after the budget, and exited once the rounds in flight ended.
        assert self.claims and not late
        assert self.ended - self.rounds_end <= END_S
        assert query(url, LOCKED) == []
        # Each round in flight finished: whatever Kafka holds was deleted, and whatever was
        # deleted is in Kafka, in per-key order, every key shape.
        assert set(self.received) == self.gone
        assert self.order == (0, 0)
        # The end's copy ran (none ran before: drain_flush_interval_s): nothing stays
        # staged, and the ledger holds each delivered id once.
        assert query(url, STAGED) == [(0,)]
        assert self.ledger == Counter(self.gone)


def _run_budgeted(stack: StackInfo, config: Config, url: str, written: dict[int, Msg],
                  run: Callable[[], RunResult], spark: SparkSession,
                  caplog: pytest.LogCaptureFixture) -> Ending:
    caplog.set_level(logging.WARNING, logger="outbox_relay.stream.stop")
    caplog.set_level(logging.DEBUG, logger="outbox_relay.observe.runtime")  # the handler's too
    began = time.time()
    result = run()
    ended = time.time()
    left = {row[0] for row in query(url, "SELECT id FROM kafka_messages")}
    gone = set(written) - left
    got = consume(stack.kafka_bootstrap, sorted({m.topic for m in written.values()}),
                  expect=len(gone), timeout_s=30)
    ledger = Counter(r.message_id for r in spark.read.format("delta")
                     .load(config.ledger.path).select("message_id").collect())
    [spent] = [r.created for r in caplog.records
               if r.name == "outbox_relay.stream.stop" and "time budget" in r.getMessage()]
    phases = [(str(r.args[0]), r.created - float(r.args[1]), r.created, r.threadName)
              for r in caplog.records if r.name == "outbox_relay.observe.runtime"
              and isinstance(r.args, tuple) and len(r.args) == 2]
    return Ending(
        result, began, ended, written, gone, Counter(r.outbox_id for r in got),
        order_report(written, got)[:2], ledger, spent,
        [(start, thread) for name, start, _, thread in phases if name == "claim"],
        max([end for name, _, end, _ in phases if name == "delete"] + [spent]))


def _config(make_config: ConfigFactory, topics: list[str], **relay: Any) -> Config:
    # No ledger copy while the drain runs: what is in Delta at the end, the end copied.
    # Every write a Spark job: the driver's producer drains this backlog within the
    # budget, and the budget is what is tested here, whichever lane writes.
    return make_config(topics, relay={"batch_size": BATCH, "direct_lane": False, **relay},
                       ledger={"drain_flush_interval_s": 3600})


def test_a_drain_past_its_time_budget_claims_nothing_new_and_exits_left_over(
    stack: StackInfo, make_config: ConfigFactory, migrated_url: str, run_relay: RelayRunner,
    spark: SparkSession, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    topics, written = _backlog(stack, migrated_url)
    config = _config(make_config, topics, available_now_budget_s=BUDGET_S)

    ending = _run_budgeted(stack, config, migrated_url, written, lambda: run_relay(config),
                           spark, caplog)
    print_summary(ending.result)
    summary = capsys.readouterr().out
    print(summary)

    ending.check(migrated_url)
    assert ending.spent - ending.began >= BUDGET_S
    # Every topic still holds rows from before the start, each on a line of its own.
    assert sorted(s.topic for s in ending.result.left_over) == sorted(topics)
    for topic in topics:
        [line] = [ln for ln in summary.splitlines() if ln.startswith(f"left over: topic {topic}:")]
        assert line.endswith(f"(the time budget of {BUDGET_S:g} s ran out)")


def test_a_budget_spent_while_the_drain_lanes_work_ends_them_too(
    stack: StackInfo, make_config: ConfigFactory, migrated_url: str, run_relay: RelayRunner,
    spark: SparkSession, caplog: pytest.LogCaptureFixture,
) -> None:
    """The budget's end, brought forward to the moment a drain lane has claimed (the
    first round alone can outlast a short budget on a loaded machine): the lanes claim
    nothing more either, and the run ends as above. Not the moment a lane holds a topic:
    CI once spent it between a lane's lock and its claim, so no lane had claimed."""
    topics, written = _backlog(stack, migrated_url)
    config = _config(make_config, topics)
    stop = StopSignal()

    def lane_claimed() -> bool:
        return any(r.name == "outbox_relay.observe.runtime" and r.threadName == LANE_THREAD
                   and isinstance(r.args, tuple) and r.args[:1] == ("claim",)
                   for r in list(caplog.records))

    def spend_once_a_lane_works() -> None:
        if wait_for(lane_claimed, 300, 0.02):
            stop.run_out("the time budget ran out (the test's)")

    spender = threading.Thread(target=spend_once_a_lane_works, daemon=True)
    spender.start()
    ending = _run_budgeted(stack, config, migrated_url, written,
                           lambda: run_relay(config, stop=stop), spark, caplog)
    spender.join(5)

    ending.check(migrated_url)
    assert any(t == LANE_THREAD and at < ending.spent for at, t in ending.claims)


def test_a_spark_submit_drain_with_a_time_budget_exits_left_over_holding_no_lock(
    stack: StackInfo, make_config: ConfigFactory, migrated_url: str, tmp_path: Path,
) -> None:
    topics, written = _backlog(stack, migrated_url, PROCESS_PER_TOPIC)
    profile = write_profile(_config(make_config, topics), tmp_path / "relay.toml")
    log = tmp_path / "relay.log"
    began = time.monotonic()
    proc = spark_submit(profile, "--available-now", "--time-budget-s", f"{PROCESS_BUDGET_S:g}",
                        log=log)
    try:
        code = proc.wait(timeout=600)
    finally:
        kill_group(proc)
    took = time.monotonic() - began
    output = log.read_text(encoding="utf-8", errors="replace")

    left = {row[0] for row in query(migrated_url, "SELECT id FROM kafka_messages")}
    gone = set(written) - left
    got = consume(stack.kafka_bootstrap, topics, expect=len(gone), timeout_s=60)
    lines = [ln for ln in output.splitlines() if ln.startswith("left over: topic ")]
    print("\n".join(lines))
    print(f"exit {code} after {took:.1f} s (budget {PROCESS_BUDGET_S:g} s from the driver's "
          f"start); {len(gone)} of {len(written)} rows left the outbox")
    assert code == ExitCode.LEFT_OVER, output[-3000:]
    assert took >= PROCESS_BUDGET_S
    assert left, "the backlog must outlast the budget"
    # Exactly the topics the outbox still holds rows of are left over: one drained within
    # the budget is not.
    still_held = {written[i].topic for i in left}
    assert sorted(ln.split(":")[1].split()[-1] for ln in lines) == sorted(still_held)
    assert all(ln.endswith(f"(the time budget of {PROCESS_BUDGET_S:g} s ran out)")
               for ln in lines)
    assert query(migrated_url, LOCKED) == []
    assert {r.outbox_id for r in got} == gone
    assert order_report(written, got)[:2] == (0, 0)


def _backlog(stack: StackInfo, url: str, per_topic: int = PER_TOPIC
             ) -> tuple[list[str], dict[int, Msg]]:
    """Three topics of `per_topic` rows each, every key shape, in transactions of 300."""
    topics = [unique("budget") for _ in range(3)]
    create_topics(stack.kafka_bootstrap, dict.fromkeys(topics, 3))
    msgs = every_key_shape(topics, per_topic)
    ids = insert(url, [msgs[i:i + 300] for i in range(0, len(msgs), 300)])
    return topics, dict(zip(ids, msgs, strict=True))

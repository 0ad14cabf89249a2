"""An available-now drain's time budget (`relay.available_now_budget_s`, `--time-budget-s`),
on the real stack.

A backlog far larger than the budget allows: past the budget the drain claims nothing
new in any lane, finishes the rounds in flight (their deletes and releases), copies the
ledger as a drain does at its end, and exits LEFT_OVER, soon after the budget and long
before the backlog would have drained. What left the outbox is read back from Kafka.
The same through the flag, as a spark-submit whose budget counts from its start.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from outbox_relay.app import print_summary
from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
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
)
from tests.integration.process import kill_group, spark_submit, write_profile

pytestmark = pytest.mark.integration

BUDGET_S = 10.0
# From the end of the rounds in flight at the budget to the exit: the query's stop
# between two batches and the end's ledger copy (delta-rs), with room for a loaded machine.
END_S = 15.0
# A claim that read the stop flag just before the budget set it.
RACE_S = 0.5
# 9,000 rows in claims of 20 a topic: about 90 s of drain without a budget.
PER_TOPIC = 3000
BATCH = 20

# The flag's budget for a spark-submit: the JVM and the session start inside it.
PROCESS_BUDGET_S = 45.0

LOCKED = "SELECT topic, locked_by FROM kafka_topic_info WHERE locked_by IS NOT NULL"
STAGED = "SELECT count(*) FROM relay_ledger_staging"


def test_a_drain_past_its_time_budget_claims_nothing_new_and_exits_left_over(
    stack: StackInfo, make_config: ConfigFactory, migrated_url: str, run_relay: RelayRunner,
    spark: SparkSession, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    # The relay's own timeline: when the budget ran out, and each phase of each round.
    caplog.set_level(logging.WARNING, logger="outbox_relay.stream.stop")
    caplog.set_level(logging.DEBUG, logger="outbox_relay.observe.runtime")  # the handler's too
    topics, written = _backlog(stack, migrated_url)
    ids = list(written)
    # No copy while the drain runs: what is in Delta at the end was copied by the end.
    config = make_config(topics, relay={"batch_size": BATCH, "available_now_budget_s": BUDGET_S},
                         ledger={"drain_flush_interval_s": 3600})

    began = time.time()
    result = run_relay(config)
    ended = time.time()

    left = {row[0] for row in query(migrated_url, "SELECT id FROM kafka_messages")}
    gone = set(ids) - left
    got = consume(stack.kafka_bootstrap, topics, expect=len(gone), timeout_s=30)
    received = Counter(r.outbox_id for r in got)
    inversions, spread, _ = order_report(written, got)
    ledger = Counter(r.message_id for r in spark.read.format("delta")
                     .load(config.ledger.path).select("message_id").collect())
    [spent] = [r.created for r in caplog.records
               if r.name == "outbox_relay.stream.stop" and "time budget" in r.getMessage()]
    phases = [(str(r.args[0]), r.created - float(r.args[1]), r.created, r.threadName)
              for r in caplog.records if r.name == "outbox_relay.observe.runtime"
              and isinstance(r.args, tuple) and len(r.args) == 2]
    claims = [(start, thread) for name, start, _, thread in phases if name == "claim"]
    late_claims = [(round(start - spent, 3), t) for start, t in claims if start > spent + RACE_S]
    rounds_end = max([end for name, _, end, _ in phases if name == "delete"] + [spent])
    print_summary(result)
    summary = capsys.readouterr().out
    print(summary)
    print(f"budget ran out {spent - began:.1f} s after the start, the rounds in flight ended "
          f"{rounds_end - spent:.1f} s later, the run {ended - rounds_end:.1f} s after them; "
          f"claims by {sorted({t for _, t in claims})}, after the budget: {late_claims}")
    print(f"exit {result.exit_code}, {ended - began:.1f} s for a budget of {BUDGET_S} s; "
          f"{len(gone)} of {len(ids)} rows left the outbox in {result.stats.batches} rounds; "
          f"{len(received)} ids in Kafka ({sum(received.values())} records); "
          f"{sum(ledger.values())} in the ledger; inversions {inversions}, spread {spread}")

    assert result.exit_code == ExitCode.LEFT_OVER
    assert gone and left, "the drain must have moved part of the backlog, not all of it"
    # It ran until its budget, claimed nothing after it, and exited once the rounds in
    # flight had ended.
    assert spent - began >= BUDGET_S
    assert claims and not late_claims
    assert ended - rounds_end <= END_S
    # Every topic still holds rows from before the start, each on a line of its own.
    assert sorted(s.topic for s in result.left_over) == sorted(topics)
    for topic in topics:
        [line] = [ln for ln in summary.splitlines() if ln.startswith(f"left over: topic {topic}:")]
        assert f"the time budget of {BUDGET_S:g} s ran out" in line
    assert query(migrated_url, LOCKED) == []
    # Each round in flight at the budget finished: whatever Kafka holds was deleted, and
    # whatever was deleted is in Kafka, in per-key order, every key shape.
    assert set(received) == gone
    assert (inversions, spread) == (0, 0)
    # The end's copy ran: nothing stays staged, and the ledger holds each delivered id once.
    assert query(migrated_url, STAGED) == [(0,)]
    assert ledger == Counter(gone)


def test_a_spark_submit_drain_with_a_time_budget_exits_left_over_holding_no_lock(
    stack: StackInfo, make_config: ConfigFactory, migrated_url: str, tmp_path: Path,
) -> None:
    topics, written = _backlog(stack, migrated_url)
    profile = write_profile(make_config(topics, relay={"batch_size": BATCH}),
                            tmp_path / "relay.toml")
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
    got = consume(stack.kafka_bootstrap, topics, expect=len(gone), timeout_s=30)
    lines = [ln for ln in output.splitlines() if ln.startswith("left over: topic ")]
    print("\n".join(lines))
    print(f"exit {code} after {took:.1f} s (budget {PROCESS_BUDGET_S:g} s from the driver's "
          f"start); {len(gone)} of {len(written)} rows left the outbox")
    assert code == ExitCode.LEFT_OVER, output[-3000:]
    assert took >= PROCESS_BUDGET_S
    assert left, "the backlog must outlast the budget"
    assert sorted(ln.split(":")[1].split()[-1] for ln in lines) == sorted(topics)
    assert all(ln.endswith(f"(the time budget of {PROCESS_BUDGET_S:g} s ran out)")
               for ln in lines)
    assert query(migrated_url, LOCKED) == []
    assert {r.outbox_id for r in got} == gone
    assert order_report(written, got)[:2] == (0, 0)


def _backlog(stack: StackInfo, url: str) -> tuple[list[str], dict[int, Msg]]:
    """Three topics of PER_TOPIC rows each, every key shape, in transactions of 300."""
    topics = [unique("budget") for _ in range(3)]
    create_topics(stack.kafka_bootstrap, dict.fromkeys(topics, 3))
    msgs = every_key_shape(topics, PER_TOPIC)
    ids = insert(url, [msgs[i:i + 300] for i in range(0, len(msgs), 300)])
    return topics, dict(zip(ids, msgs, strict=True))

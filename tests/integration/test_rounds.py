"""Several claim rounds inside one micro-batch body, on the real stack.

The counts of Spark's micro-batches come from the query's checkpoint (one file per
committed batch under commits/), the records from a consumer.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import psycopg2
import pytest

from outbox_relay.config import Config
from outbox_relay.stack import StackInfo
from outbox_relay.stream import query as query_module
from outbox_relay.stream.runner import EXIT_OK, RunResult
from outbox_relay.stream.stop import StopSignal
from tests.integration.conftest import ConfigFactory, RelayRunner, run_in_thread
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

pytestmark = pytest.mark.integration


def committed_micro_batches(config: Config) -> int:
    commits = Path(config.relay.checkpoint_path) / "commits"
    return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else 0


def test_a_drain_runs_its_rounds_inside_few_micro_batches_in_key_order(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
) -> None:
    topics = {unique("rounds-a"): 3, unique("rounds-b"): 2}
    create_topics(stack.kafka_bootstrap, topics)
    msgs = every_key_shape(list(topics), 42)
    ids = insert(migrated_url, [[m] for m in msgs])
    # White space and a backslash in the source name: the executors' read names the
    # relay's lock token (which starts with it) in a connection setting.
    config = make_config(list(topics), relay={
        "batch_size": 5, "micro_batch_s": 600, "source_name": "rounds relay \\ x"})

    result = run_relay(config)

    assert result.exit_code == EXIT_OK
    got = consume(stack.kafka_bootstrap, list(topics), expect=len(ids))
    assert sorted(r.outbox_id for r in got) == sorted(ids), "lost or duplicated"
    inversions, spread, _ = order_report(dict(zip(ids, msgs, strict=True)), got)
    assert (inversions, spread) == (0, 0)
    rounds = result.stats.batches
    assert rounds >= 42 // 5, f"{rounds} rounds for 42 rows a topic in claims of 5"
    # One round before the query starts, the rest in its first micro-batch.
    assert committed_micro_batches(config) <= 2 < rounds
    assert query(migrated_url, "SELECT count(*) FROM relay_sessions")[0][0] == 0


# The run's first round reads kafka_topic_info; this holds it there, after the run took
# its bound (the outbox's highest id), until the writer has committed.
HOLD_TOPICS = "LOCK TABLE kafka_topic_info IN ACCESS EXCLUSIVE MODE"
RUN_WAITS = """
SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
AND application_name = 'outbox-relay' AND wait_event_type = 'Lock'
"""


@pytest.mark.parametrize("before", [20, 0], ids=["20-rows", "empty-outbox"])
def test_rows_written_during_a_drain_do_not_keep_it_running_nor_count_as_left_over(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    before: int,
) -> None:
    """An available-now run's bound is the outbox's highest id at its start; on an empty
    outbox that is 0, which must still be a bound (rows written later lie above it), not
    "no bound". A writer commits small transactions, every key shape, from just after the
    bound was taken until the run ends."""
    topic = unique("rounds-bound")
    create_topics(stack.kafka_bootstrap, {topic: 3})
    first = every_key_shape([topic], before)
    first_ids = insert(migrated_url, [[m] for m in first])
    written = dict(zip(first_ids, first, strict=True))
    micro_batch_s = 60
    config = make_config([topic], relay={"batch_size": 2, "micro_batch_s": micro_batch_s})
    done, wrote = threading.Event(), threading.Event()
    late: dict[int, Msg] = {}

    def write_on() -> None:
        # Until the run ends; the cap only ends a run that never would.
        n, cap = 0, time.monotonic() + 2 * micro_batch_s
        while not done.is_set() and time.monotonic() < cap:
            msgs = [replace(m, value=(m.value or b"") + f"/late{n}".encode())
                    for m in every_key_shape([topic], 3)[n % 2:]]
            late.update(zip(insert(migrated_url, [msgs]), msgs, strict=True))
            wrote.set()
            n += 1
            done.wait(0.05)

    def timed() -> RunResult:
        started = time.monotonic()
        result = run_relay(config)
        took.append(time.monotonic() - started)
        return result

    took: list[float] = []
    writer = threading.Thread(target=write_on, daemon=True)
    holder = psycopg2.connect(migrated_url)
    try:
        with holder.cursor() as cur:
            cur.execute(HOLD_TOPICS)
        thread, results = run_in_thread(timed)
        assert wait_for(lambda: query(migrated_url, RUN_WAITS)[0][0] > 0, 60, 0.05), (
            "the run's first round never reached kafka_topic_info")
        writer.start()
        assert wrote.wait(30)
        holder.rollback()
        thread.join(4 * micro_batch_s)
    finally:
        holder.close()
        done.set()
        if writer.is_alive():
            writer.join(10)
    written |= late
    (result,) = results
    # Without the bound every round finds a new row and the body ends only at
    # micro_batch_s; left over would name rows written after the start.
    assert took[0] < micro_batch_s, f"the drain ran {took[0]:.0f} s while rows kept arriving"
    assert (result.exit_code, result.left_over) == (EXIT_OK, [])
    remaining = {r[0] for r in query(migrated_url, "SELECT id FROM kafka_messages")}
    assert not remaining & set(first_ids), "rows from before the start were left"
    delivered = set(written) - remaining
    got = consume(stack.kafka_bootstrap, [topic], expect=len(delivered))
    assert {r.outbox_id for r in got} == delivered, "delivered rows missing from Kafka"
    assert result.stats.published[topic] == len(delivered)
    inversions, spread, _ = order_report(written, got)
    assert (inversions, spread) == (0, 0)


def test_a_continuous_body_serves_later_writes_and_stops_promptly(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
) -> None:
    topic = unique("rounds-c")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    config = make_config([topic], relay={"micro_batch_s": 600, "poll_interval_s": 0.1})
    stop = StopSignal()
    thread, results = run_in_thread(lambda: run_relay(config, available_now=False, stop=stop))
    ids: list[int] = []
    try:
        for wave in range(3):
            ids += insert(migrated_url, [[Msg(topic, f"k{i % 3}".encode(), f"{wave}.{i}".encode())]
                                         for i in range(10)])
            assert wait_for(lambda: query(migrated_url, "SELECT count(*) FROM kafka_messages "
                                          "WHERE topic = %s", (topic,))[0][0] == 0, 120, 0.1)
            time.sleep(1.0)
        got = consume(stack.kafka_bootstrap, [topic], expect=len(ids))
        assert sorted(r.outbox_id for r in got) == sorted(ids)
    finally:
        asked = time.monotonic()
        stop.request("test")
        thread.join(120)
    stopped_in = time.monotonic() - asked
    assert results and results[0].exit_code == EXIT_OK
    assert results[0].stats.batches >= 3
    # All three waves inside one body, which the stop ended within its poll.
    assert committed_micro_batches(config) <= 1
    assert stopped_in < 15, f"the stop took {stopped_in:.1f} s"


def test_a_stop_that_fails_the_query_start_is_a_stop_not_a_failure(
    make_config: ConfigFactory, run_relay: RelayRunner, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The start-up round can finish all there is, so a supervisor's SIGTERM to the
    process group may land while the query starts, killing the Python worker that the
    start spawns (seen in the fault suite). Played here: the stop, then that failure."""
    stop = StopSignal()

    def killed_start(*args: object, **kwargs: object) -> None:
        stop.request("test")
        raise RuntimeError("EOFException occurred while reading the port number from "
                           "pyspark.daemon's stdout and terminated with code: 143")

    monkeypatch.setattr(query_module, "start_query", killed_start)
    result = run_relay(make_config([unique("rounds-stop")]), available_now=False, stop=stop)
    assert result.exit_code == EXIT_OK


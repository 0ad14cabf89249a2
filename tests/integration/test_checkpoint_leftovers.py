"""A relay killed while Spark wrote its checkpoint's first entry starts again.

Spark writes each checkpoint file as a hidden temporary file and renames it into place. A
SIGKILL between the two leaves the temporary file alone in `offsets/` (CI saw it: the relay
that test_process.py kills after an acknowledgement, mid-start). Spark then finds no batch
to resume, yet a directory it requires to be empty for a new query, and refused every
later start with STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY: the outbox stayed undrained
until someone deleted the checkpoint by hand. The relay's offsets mean nothing (the
outbox is the truth), so it starts."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from outbox_relay.stream.stop import StopSignal
from tests.integration.conftest import ConfigFactory, RelayRunner, run_in_thread
from tests.integration.helpers import Msg, consume, create_topics, insert, query, unique, wait_for

pytestmark = pytest.mark.integration


def _cut_short(directory: Path, batch: int) -> None:
    """What a SIGKILL leaves while Spark writes `directory/<batch>`: its temporary file
    (named as Spark's CheckpointFileManager names them), part-written."""
    directory.mkdir(parents=True)
    (directory / f".{batch}.{uuid.uuid4()}.tmp").write_text('v1\n{"batchWatermarkMs":0,"ba')


def _polling(spark: SparkSession) -> bool:
    """Whether the relay's query got past its start and polls its source."""
    return any(q.status["message"] in ("Processing new data", "Waiting for data to arrive")
               for q in spark.streams.active if (q.name or "").startswith("outbox-relay:"))


@pytest.mark.parametrize("leftover", ["offsets", "offsets-and-commits"])
def test_a_checkpoint_entry_cut_short_by_a_kill_does_not_stop_the_next_start(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    spark: SparkSession, leftover: str,
) -> None:
    topic = unique("cut-checkpoint")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    config = make_config([topic])
    checkpoint = Path(config.relay.checkpoint_path)
    _cut_short(checkpoint / "offsets", 0)
    if leftover == "offsets-and-commits":
        _cut_short(checkpoint / "commits", 0)

    # Continuous: the query starts with an empty outbox (an available-now run could
    # deliver everything in its start-up round and never start it).
    stop = StopSignal()
    thread, results = run_in_thread(lambda: run_relay(config, available_now=False, stop=stop))
    try:
        assert wait_for(lambda: _polling(spark) or not thread.is_alive(), 240, interval_s=0.2)
        assert thread.is_alive(), f"the relay ended at its start: {results}"
        # Every key shape, written once the query runs.
        messages = [Msg(topic, None, b"keyless"), Msg(topic, b"\x00\xff", b"binary"),
                    Msg(topic, b"k", b"pk-equal", "k"), Msg(topic, b"k", b"pk-other", "g-7"),
                    Msg(topic, b"k", b"pk-null")]
        ids = insert(migrated_url, [messages[:2], messages[2:]])
        got = consume(stack.kafka_bootstrap, [topic], expect=len(ids), timeout_s=120)
        assert sorted(r.outbox_id for r in got) == sorted(ids)
        assert wait_for(lambda: not query(migrated_url, "SELECT 1 FROM kafka_messages"), 60)
    finally:
        stop.request("test")
        thread.join(timeout=180)
    assert not thread.is_alive()
    assert results[0].exit_code == EXIT_OK

"""relay.backlog_lane = "direct": the driver's producer sends backlogs too, in claims of
the direct lane's limits, and no claim is Spark's for its size (docs/how-it-works.md,
the two lanes). A backlog many times those limits, in every key shape, arrives whole and
in key order as a consumer reads it back, with the Spark session up (in process, drain
lanes beside the main rounds) and, as `spark-submit` runs it, without one ever built.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from outbox_relay.config import Config
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
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
from tests.integration.process import spark_submit, write_profile

pytestmark = pytest.mark.integration

PER_TOPIC = 600
MAX_ROWS = 50  # a topic's backlog is twelve claims of the direct lane's limit
# The session's build: SparkContext's first line.
SESSION_BUILT = "Running Spark version"


def _backlog(stack: StackInfo, url: str, make_config: ConfigFactory,
             topics: dict[str, int]) -> tuple[dict[int, Msg], Config]:
    """Every key shape, PER_TOPIC rows a topic in transactions of 100, and a profile whose
    backlogs take the driver's producer in claims of MAX_ROWS."""
    create_topics(stack.kafka_bootstrap, topics)
    msgs = every_key_shape(list(topics), PER_TOPIC)
    ids = insert(url, [msgs[i:i + 100] for i in range(0, len(msgs), 100)])
    config = make_config(list(topics), relay={
        "batch_size": 5_000, "backlog_lane": "direct", "direct_max_rows": MAX_ROWS})
    return dict(zip(ids, msgs, strict=True)), config


def _check(bootstrap: str, topics: dict[str, int], written: dict[int, Msg]) -> None:
    got = consume(bootstrap, list(topics), expect=len(written))
    assert Counter(r.outbox_id for r in got) == Counter(list(written)), "lost or duplicated"
    inversions, spread, keyless = order_report(written, got)
    assert spread == 0, "every partitioning key sits in one Kafka partition"
    assert inversions == 0, "first appearances in id order per partitioning key"
    assert keyless > 0
    for r in got:
        m = written[r.outbox_id]
        assert (r.topic, r.key, r.value) == (m.topic, m.key, m.value), r.outbox_id


def test_a_backlog_goes_by_the_drivers_producer_with_spark_up(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
) -> None:
    topics = {unique("backlog-a"): 3, unique("backlog-b"): 5}
    written, config = _backlog(stack, migrated_url, make_config, topics)

    result = run_relay(config)

    assert result.exit_code == EXIT_OK
    print(f"lanes {dict(result.stats.lanes)}, {result.stats.batches} batches")
    assert dict(result.stats.lanes) == {"direct": len(written)}
    # Each topic's claim stopped at the direct lane's limit, not at batch_size.
    assert result.stats.batches >= PER_TOPIC // MAX_ROWS
    _check(stack.kafka_bootstrap, topics, written)
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages") == [(0,)]


def test_a_submitted_drain_of_a_backlog_builds_no_spark_session(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, tmp_path: Path,
) -> None:
    topics = {unique("nosession-a"): 3, unique("nosession-b"): 2}
    written, config = _backlog(stack, migrated_url, make_config, topics)
    log = tmp_path / "drain.log"

    proc = spark_submit(write_profile(config, tmp_path / "relay.toml"), "--available-now",
                        log=log)

    assert proc.wait(timeout=240) == EXIT_OK, log.read_text()[-3000:]
    text = log.read_text()
    assert f"{len(written)} by the driver's producer, 0 by Spark's executors" in text, text[-3000:]
    assert SESSION_BUILT not in text, "a drain the driver's producer finishes needs no session"
    _check(stack.kafka_bootstrap, topics, written)
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages") == [(0,)]

"""The runtime metrics, read the way Prometheus reads them: a scrape of a continuous
relay's /metrics over HTTP, and a real Pushgateway after an available-now run. The
values are checked against what a consumer received and what the database held."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import SecretStr
from pyspark.sql import SparkSession

from outbox_relay.config import Config
from outbox_relay.observe.runtime import OTHER_TOPICS
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK, run
from outbox_relay.stream.stop import StopSignal
from outbox_relay.wiring import build_relay
from tests.integration.conftest import ConfigFactory, RelayRunner, run_in_thread
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    every_key_shape,
    insert,
    query,
    unique,
    wait_for,
)
from tests.integration.prometheus import free_port, get, parse, value

pytestmark = pytest.mark.integration

# Rows written two hours before now: their lag must land between the 1 h and 6 h bounds.
INSERT_OLD = """
INSERT INTO kafka_messages (topic, message, key, created_at)
SELECT %s, convert_to('old-' || g, 'UTF8'), convert_to('k' || (g %% 4), 'UTF8'),
       (now() AT TIME ZONE 'UTC') - interval '2 hours'
FROM generate_series(1, %s) g
"""


# The outbox's state, which only the standing exporter (`outbox-relay metrics serve`)
# exports: a run's push would freeze it at the run's end (backlog 0 after a clean drain)
# until the next push.
OUTBOX_STATE = {"outbox_relay_database_up", "outbox_relay_backlog_messages",
                "outbox_relay_oldest_message_age_seconds", "outbox_relay_topic_state",
                "outbox_relay_parked_messages", "outbox_relay_horizon_age_seconds"}


def with_secrets(config: Config, password: str) -> Config:
    return config.model_copy(update={
        "postgres": config.postgres.model_copy(update={"password": SecretStr(password)})})


def test_a_continuous_relay_serves_metrics_that_match_the_delivery(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    tmp_path: Path,
) -> None:
    fresh, old = unique("metrics-fresh"), unique("metrics.old_")
    create_topics(stack.kafka_bootstrap, {fresh: 3, old: 2})
    port = free_port()
    secret = f"pg-secret-{uuid.uuid4().hex}"
    config = with_secrets(make_config([fresh, old], relay={"micro_batch_s": 600},
                                      metrics={"enabled": True, "port": port}), secret)
    stop = StopSignal()
    started = time.time()
    thread, results = run_in_thread(lambda: run_relay(config, available_now=False, stop=stop))
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        fresh_ids = insert(migrated_url, [[m] for m in every_key_shape([fresh], 24)])
        query(migrated_url, INSERT_OLD, (old, 17))
        assert wait_for(lambda: query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0]
                        == 0, 180, 0.2)
        got = consume(stack.kafka_bootstrap, [fresh, old], expect=len(fresh_ids) + 17)
        delivered = Counter(r.topic for r in {(r.topic, r.outbox_id): r for r in got}.values())
        assert delivered == {fresh: len(fresh_ids), old: 17}

        def counted() -> bool:
            s = parse(get(url))
            return all(value(s, "outbox_relay_messages_total", topic=t, outcome="published")
                       == n for t, n in delivered.items())

        # The counters follow finish()'s commit, which the empty outbox shows first.
        assert wait_for(counted, 30, 0.2), get(url)
        text = get(url)
    finally:
        stop.request("test")
        thread.join(120)
    (tmp_path / "metrics.txt").write_text(text, encoding="utf-8")  # kept for a look
    assert results and results[0].exit_code == EXIT_OK
    samples = parse(text)
    total = len(fresh_ids) + 17
    lag = "outbox_relay_delivery_lag_seconds"
    assert value(samples, f"{lag}_count") == total
    assert value(samples, f"{lag}_bucket", le="300.0") == len(fresh_ids)
    assert value(samples, f"{lag}_bucket", le="3600.0") == len(fresh_ids)
    assert value(samples, f"{lag}_bucket", le="21600.0") == total
    elapsed = time.time() - started
    assert 17 * 7200 <= value(samples, f"{lag}_sum") <= 17 * (7200 + elapsed) + 24 * elapsed
    for phase in ("lock", "claim", "write", "delete"):
        assert value(samples, "outbox_relay_batch_phase_seconds_count", phase=phase) >= 1
    assert value(samples, "outbox_relay_lock_lost_total") == 0
    assert not [k for k in samples if k[0] == "outbox_relay_send_failures_total"]
    assert not [k for k in samples if k[0] == "outbox_relay_messages_total"
                and dict(k[1])["outcome"] != "published"]
    assert started <= value(samples, "outbox_relay_last_success_timestamp_seconds") <= time.time()
    info = [dict(k[1]) for k in samples if k[0] == "outbox_relay_build_info"]
    assert [i["source"] for i in info] == [config.relay.source_name]
    assert secret not in text and migrated_url not in text
    assert not OUTBOX_STATE & {k[0] for k in samples}
    with pytest.raises(OSError):  # stopped with the relay
        get(url)


def test_a_drain_pushes_its_metrics_with_a_capped_topic_label(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    pushgateway: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    sizes = {unique("push-a"): 5, unique("push-b"): 7, unique("push-c"): 11}
    create_topics(stack.kafka_bootstrap, dict.fromkeys(sizes, 2))
    for topic, n in sizes.items():
        insert(migrated_url, [[m] for m in every_key_shape([topic], n)])
    secret = f"pg-secret-{uuid.uuid4().hex}"
    gateway_secret = f"gw-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("RELAY_PUSHGATEWAY_USERNAME", "relay")
    monkeypatch.setenv("RELAY_PUSHGATEWAY_PASSWORD", gateway_secret)
    job = unique("job")
    config = with_secrets(make_config(list(sizes), metrics={
        "enabled": True, "pushgateway_url": pushgateway, "job": job, "max_label_topics": 2,
        "port": free_port()}), secret)
    result = run_relay(config)
    assert result.exit_code == EXIT_OK
    got = consume(stack.kafka_bootstrap, list(sizes), expect=sum(sizes.values()))
    assert Counter(r.topic for r in got) == sizes
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0] == 0

    text = get(f"{pushgateway}/metrics")
    samples = parse(text, job=job, instance=config.relay.source_name)
    published = {dict(k[1])["topic"]: v for k, v in samples.items()
                 if k[0] == "outbox_relay_messages_total"}
    own = [t for t in published if t != OTHER_TOPICS]
    assert len(own) == 2 and OTHER_TOPICS in published, published
    assert all(published[t] == sizes[t] for t in own)
    assert published[OTHER_TOPICS] == sum(sizes.values()) - sum(sizes[t] for t in own)
    assert value(samples, "outbox_relay_delivery_lag_seconds_count") == sum(sizes.values())
    assert value(samples, "push_time_seconds") > 0
    assert value(samples, "push_failure_time_seconds") == 0
    assert not OUTBOX_STATE & {k[0] for k in samples}, sorted({k[0] for k in samples})
    assert secret not in text and gateway_secret not in text


def test_a_failed_push_leaves_the_exit_code_alone(
    make_config: ConfigFactory, run_relay: RelayRunner, caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique("push-none")
    config = make_config([topic], metrics={
        "enabled": True, "pushgateway_url": f"http://127.0.0.1:{free_port()}",
        "pushgateway_timeout_s": 2})
    assert run_relay(config).exit_code == EXIT_OK
    assert "could not push the metrics" in caplog.text


def test_a_record_only_the_broker_refuses_counts_as_a_record_failure_and_parked(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, spark: SparkSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A keyless record on a compacted topic that the relay believes is not compacted
    (a failpoint keeps its view stale): only the broker refuses it. The registry is the
    caller's own, as a second collector's would be (build_relay's `registry`)."""
    topic = unique("metrics-poison")
    monkeypatch.setenv("RELAY_FAILPOINTS", "stale_topic_config")
    create_topics(stack.kafka_bootstrap, {topic: 1}, **{"cleanup.policy": "compact"})
    insert(migrated_url, [[Msg(topic, b"k1", b"a")], [Msg(topic, b"k2", b"b")],
                          [Msg(topic, None, b"no key")], [Msg(topic, b"k1", b"c")]])
    config = make_config([topic], relay={"topic_rules": [{"match": ".*", "policy": "park"}]})
    registry = CollectorRegistry()
    relay = build_relay(config, spark, registry)
    try:
        assert run(relay, available_now=True).exit_code == EXIT_OK
    finally:
        relay.close()
    parked = query(migrated_url, "SELECT count(*) FROM relay_parked_messages")[0][0]
    got = consume(stack.kafka_bootstrap, [topic], expect=3)
    samples = parse(generate_latest(registry).decode())
    assert value(samples, "outbox_relay_messages_total", topic=topic, outcome="parked") \
        == parked == 1
    assert value(samples, "outbox_relay_messages_total", topic=topic, outcome="published") \
        == len({r.outbox_id for r in got}) == 3
    failures = {dict(k[1])["kind"]: v for k, v in samples.items()
                if k[0] == "outbox_relay_send_failures_total"}
    assert failures == {"record": 1}, failures

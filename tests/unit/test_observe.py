"""The pure parts of outbox_relay.observe: label cap, bucketed lag, failure kinds, progress line,
JSON logs, the [metrics] section."""

from __future__ import annotations

import io
import json
import logging
import socket
import threading
import time
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from outbox_relay.config import MetricsConfig
from outbox_relay.config.load import build_config
from outbox_relay.errors import ConfigError
from outbox_relay.observe.logs import JsonFormatter, configure_logging
from outbox_relay.observe.progress import Progress, format_progress
from outbox_relay.observe.runtime import OTHER_TOPICS, DeliveryLag, RuntimeMetrics, TopicLabels
from outbox_relay.observe.serve import exported, push
from outbox_relay.stream.failures import failure_kind
from outbox_relay.stream.stats import RelayStats


def samples(metrics: RuntimeMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_first_n_topics_keep_their_label_and_the_rest_share_one() -> None:
    label = TopicLabels(2)
    assert [label(t) for t in ["a", "b", "c", "a", "d", "b"]] == \
        ["a", "b", OTHER_TOPICS, "a", OTHER_TOPICS, "b"]


def test_no_kafka_topic_can_take_the_shared_label() -> None:
    from outbox_relay.control.kafka_admin import topic_name_problem

    assert topic_name_problem(OTHER_TOPICS) is not None


def test_capped_counters_add_up() -> None:
    metrics = RuntimeMetrics(MetricsConfig(max_label_topics=1), "src")
    metrics.messages("x", "published", 3)
    metrics.messages("y", "published", 4)
    metrics.messages("z", "parked", 1)
    metrics.messages("z", "compacted", 0)  # nothing: no series of its own
    got = samples(metrics)
    assert got[("outbox_relay_messages_total", (("outcome", "published"), ("topic", "x")))] == 3
    assert got[("outbox_relay_messages_total",
                (("outcome", "published"), ("topic", OTHER_TOPICS)))] == 4
    assert got[("outbox_relay_messages_total",
                (("outcome", "parked"), ("topic", OTHER_TOPICS)))] == 1
    assert not any(k[0] == "outbox_relay_messages_total" and ("outcome", "compacted") in k[1]
                   for k in got)


def test_bucket_counts_become_a_cumulative_histogram() -> None:
    lag = DeliveryLag((0.5, 1.0, 10.0))
    # Indexes: 0 up to 0.5, 1 in (0.5, 1], 2 in (1, 10], 3 above 10.
    lag.add([(0, 2, 0.4), (2, 3, 6.0)])
    lag.add([(3, 1, 42.0), (0, 1, 0.1)])
    family = lag.collect()[0]  # type: ignore[index]
    by_le = {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}
    assert by_le == {"0.5": 3, "1.0": 3, "10.0": 6, "+Inf": 7}
    values = {s.name: s.value for s in family.samples if not s.name.endswith("_bucket")}
    assert values == {"outbox_relay_delivery_lag_seconds_count": 7,
                      "outbox_relay_delivery_lag_seconds_sum": pytest.approx(48.5)}


def test_runtime_metrics_are_named_and_exposed() -> None:
    metrics = RuntimeMetrics(MetricsConfig(), "src-1")
    with metrics.phase("write"):
        pass
    metrics.lock_lost(2)
    metrics.send_failure("t", "outage")
    metrics.succeeded(1234.5)
    got = samples(metrics)
    assert got[("outbox_relay_lock_lost_total", ())] == 2
    assert got[("outbox_relay_send_failures_total", (("kind", "outage"), ("topic", "t")))] == 1
    assert got[("outbox_relay_last_success_timestamp_seconds", ())] == 1234.5
    assert got[("outbox_relay_batch_phase_seconds_count", (("phase", "write"),))] == 1
    info = [k for k in got if k[0] == "outbox_relay_build_info"]
    assert len(info) == 1 and dict(info[0][1])["source"] == "src-1"
    assert set(dict(info[0][1])) == {"version", "python_version", "pyspark_version", "source"}


def test_two_relays_in_one_process_have_registries_of_their_own() -> None:
    a, b = RuntimeMetrics(MetricsConfig(), "a"), RuntimeMetrics(MetricsConfig(), "b")
    a.lock_lost(1)
    assert samples(b)[("outbox_relay_lock_lost_total", ())] == 0


@pytest.mark.parametrize(("reason", "kind"), [
    ("Kafka unavailable: KafkaException: ...", "outage"),
    ("org.apache.kafka.common.errors.TimeoutException: Expiring 3 record(s) for t-0", "timeout"),
    ("message 7: org.apache.kafka.common.errors.RecordTooLargeException: too big "
     "(found in 4 sends)", "record"),
    ("org.apache.kafka.common.errors.InvalidTopicException: bad", "topic"),
    ("org.apache.kafka.common.errors.UnknownTopicOrPartitionException: gone", "topic"),
    ("org.apache.kafka.common.errors.TopicAuthorizationException: denied", "topic"),
    ("java.lang.IllegalStateException: odd", "other"),
])
def test_failure_kinds(reason: str, kind: str) -> None:
    assert failure_kind(reason) == kind


def test_the_progress_line_reads_well() -> None:
    assert format_progress(12345, 987655, 8765.4) == \
        "outbox-relay: 12,345 delivered, 987,655 left, 8,765 msg/s"
    assert format_progress(10, -3, 0.0) == "outbox-relay: 10 delivered, 0 left, 0 msg/s"


def test_the_progress_line_is_redrawn_in_place_a_few_times_a_second() -> None:
    now = [100.0]
    out = io.StringIO()
    progress = Progress(out, waiting=1000, clock=lambda: now[0])
    stats = RelayStats()
    progress.close(stats)
    assert out.getvalue() == ""  # never drawn: nothing to end
    now[0] = 102.0
    stats.published["a"] += 400
    stats.compacted["a"] += 50
    stats.parked["b"] += 50
    progress.update(stats)
    now[0] = 102.1
    stats.published["a"] += 100
    progress.update(stats)  # within 0.25 s of the last: not drawn
    assert out.getvalue() == "\routbox-relay: 400 delivered, 500 left, 200 msg/s"
    now[0] = 104.0
    stats.published["a"] += 100
    progress.update(stats)
    now[0] = 104.1
    stats.published["a"] += 100
    progress.update(stats)  # not drawn now, but close() draws it
    now[0] = 110.0
    progress.close(stats)
    assert out.getvalue().endswith("\routbox-relay: 700 delivered, 200 left, 171 msg/s\n")


def _record(**extra: Any) -> logging.LogRecord:
    return logging.LogRecord("relay.x", logging.WARNING, __file__, 1, "hello %s", ("wörld",),
                             **extra)


def test_json_logs_hold_time_level_logger_message() -> None:
    entry = json.loads(JsonFormatter().format(_record(exc_info=None)))
    assert entry.keys() == {"time", "level", "logger", "message"}
    assert (entry["level"], entry["logger"], entry["message"]) == \
        ("WARNING", "relay.x", "hello wörld")
    assert entry["time"].endswith("Z") and "T" in entry["time"]


def test_json_logs_carry_the_exception_on_the_same_line() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        import sys

        line = JsonFormatter().format(_record(exc_info=sys.exc_info()))
    assert "\n" not in line
    entry = json.loads(line)
    assert "ValueError: bad\nvalue" in entry["exception"]
    assert "Traceback" in entry["exception"]


def test_configure_logging_prints_one_json_object_per_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("info", "json")
    configure_logging("info", "json")  # twice: still one line per record
    try:
        logging.getLogger("outbox_relay.t").info("one")
        logging.getLogger("outbox_relay.t").error("two")
    finally:
        configure_logging("warning", "text")
    lines = capsys.readouterr().err.splitlines()
    assert [json.loads(line)["message"] for line in lines] == ["one", "two"]


def test_the_metrics_section_validates() -> None:
    config = build_config({"metrics": {"enabled": True, "port": 9999, "pushgateway_url": ""}},
                          env={})
    assert config.metrics.pushgateway_url is None and config.metrics.host == "127.0.0.1"
    with pytest.raises(ConfigError, match=r"metrics\.pushgateway_url: .*never go into the URL"):
        build_config({"metrics": {"pushgateway_url": "http://u:secret@gw:9091"}}, env={})
    with pytest.raises(ConfigError, match=r"metrics\.portt: unknown setting"):
        build_config({"metrics": {"portt": 1}}, env={})
    with pytest.raises(ConfigError, match=r"metrics\.port"):
        build_config({"metrics": {"port": 70000}}, env={})


def test_a_failed_push_is_logged_and_returns(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = MetricsConfig(enabled=True, pushgateway_url=f"http://127.0.0.1:{port}",
                           pushgateway_timeout_s=2)
    metrics = RuntimeMetrics(config, "src")
    with caplog.at_level(logging.WARNING):
        assert push(config, metrics.registry, "src", env={}) is False
    assert "could not push the metrics" in caplog.text


def test_a_port_in_use_is_a_config_error_naming_the_key() -> None:
    from outbox_relay.observe.serve import serve

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        config = MetricsConfig(enabled=True, port=s.getsockname()[1])
        with pytest.raises(ConfigError, match=r"metrics\.port: cannot listen on 127\.0\.0\.1"):
            serve(config, RuntimeMetrics(config, "src").registry)


def test_the_pushgateway_credentials_travel_in_a_header_from_the_environment() -> None:
    import base64
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    seen: list[tuple[str, str | None]] = []

    class Gateway(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.path, self.headers.get("Authorization")))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Gateway)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    config = MetricsConfig(enabled=True, job="j",
                           pushgateway_url=f"http://127.0.0.1:{server.server_port}")
    try:
        env = {"RELAY_PUSHGATEWAY_USERNAME": "relay", "RELAY_PUSHGATEWAY_PASSWORD": "s3cret"}
        assert push(config, RuntimeMetrics(config, "src").registry, "src", env=env)
    finally:
        thread.join(10)
        server.server_close()
    expected = "Basic " + base64.b64encode(b"relay:s3cret").decode()
    assert seen == [("/metrics/job/j/instance/src", expected)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_continuous_run_pushes_every_interval_and_at_its_end() -> None:
    """A Databricks driver's /metrics is scraped by nothing: a continuous relay with a
    Pushgateway pushes while it runs, not only when it ends."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    puts: list[float] = []

    class Gateway(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            puts.append(time.monotonic())
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = MetricsConfig(enabled=True, port=_free_port(), push_interval_s=0.1,
                           pushgateway_url=f"http://127.0.0.1:{server.server_port}")
    try:
        with exported(config, RuntimeMetrics(config, "src").registry, False, "src"):
            deadline = time.monotonic() + 10
            while len(puts) < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(puts) >= 3, "no pushes while the run lasts"
            stopped = time.monotonic()
        assert puts[-1] >= stopped, "no push at the end"
        ended = len(puts)
        time.sleep(0.3)
        assert len(puts) == ended, "pushes went on after the run"
    finally:
        server.shutdown()
        server.server_close()


def test_a_failing_periodic_push_warns_once_not_every_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = MetricsConfig(enabled=True, port=_free_port(), push_interval_s=0.05,
                           pushgateway_timeout_s=1,
                           pushgateway_url=f"http://127.0.0.1:{_free_port()}")
    registry = RuntimeMetrics(config, "src").registry
    with caplog.at_level(logging.WARNING), exported(config, registry, False, "src"):
        time.sleep(0.5)
    warnings = [r.getMessage() for r in caplog.records if "could not push" in r.getMessage()]
    # One when pushing starts to fail, one for the push at the end.
    assert len(warnings) == 2, warnings

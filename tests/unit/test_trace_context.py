"""Trace context in published messages (outbox_relay.outbox.trace), on the publisher's shared
step (outbox_relay.outbox.checks.checked_rows), with the OpenTelemetry SDK's in-memory exporter.

The SDK's global tracer provider can be set once per process: every test uses its own
provider's tracer, and `start_as_current_span` / `use_span` make its spans current.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from outbox_relay.errors import InvalidMessageError, PublishError
from outbox_relay.outbox import trace as relay_trace
from outbox_relay.outbox.checks import Limits, Message, OutboxRow, checked_rows, limits
from tests.without_opentelemetry import BLOCK_OPENTELEMETRY

TOPIC = "orders.created"


@pytest.fixture(autouse=True)
def _switch_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(relay_trace.SWITCH, raising=False)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> Iterator[trace.Tracer]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test_trace_context")
    provider.shutdown()


def headers_of(row: OutboxRow) -> dict[str, str]:
    return json.loads(row.headers) if row.headers is not None else {}


def rows(*messages: Message, trace_context: bool = True,
         limit: Limits | None = None) -> list[OutboxRow]:
    return checked_rows(messages, limit or limits(), numbered=True, trace_context=trace_context)


def traceparent(span: ReadableSpan | trace.Span) -> str:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def test_inside_a_span_the_row_carries_its_traceparent(
    tracer: trace.Tracer, exporter: InMemorySpanExporter,
) -> None:
    with tracer.start_as_current_span("place order"):
        row, = rows(Message(TOPIC, b"{}", key="order-42", headers={"app": "shop"}))
    span, = exporter.get_finished_spans()
    headers = headers_of(row)
    assert headers == {"app": "shop", "traceparent": traceparent(span)}
    version, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert span.context is not None
    assert version == "00" and int(flags, 16) & 1  # sampled (0x02 is W3C's random bit)
    assert int(trace_id, 16) == span.context.trace_id
    assert int(span_id, 16) == span.context.span_id
    # No tracestate header for a span without one.
    assert "tracestate" not in headers


def test_the_consumer_extracts_the_publishers_span_as_its_parent(
    tracer: trace.Tracer, exporter: InMemorySpanExporter,
) -> None:
    with tracer.start_as_current_span("publish"):
        row, = rows(Message(TOPIC, b"{}"))
    carrier = headers_of(row)
    with tracer.start_as_current_span(
            "consume", context=TraceContextTextMapPropagator().extract(carrier)):
        pass
    publisher, consumer = exporter.get_finished_spans()
    assert publisher.context is not None and consumer.context is not None
    assert consumer.context.trace_id == publisher.context.trace_id
    assert consumer.parent is not None and consumer.parent.span_id == publisher.context.span_id


def test_tracestate_travels_when_the_span_has_one(
    tracer: trace.Tracer, exporter: InMemorySpanExporter,
) -> None:
    state = TraceState([("shop", "t61rcWkgMzE"), ("congo", "lZWRzIHRoNhcm")])
    upstream = SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7,
                           is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED),
                           trace_state=state)
    parent = trace.set_span_in_context(NonRecordingSpan(upstream))
    with tracer.start_as_current_span("handle request", context=parent):
        row, = rows(Message(TOPIC, b"{}"))
    span, = exporter.get_finished_spans()
    headers = headers_of(row)
    assert headers["traceparent"] == traceparent(span)
    assert headers["traceparent"].split("-")[1] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert headers["tracestate"] == "shop=t61rcWkgMzE,congo=lZWRzIHRoNhcm"


def test_no_span_no_header_and_no_headers_stay_null(tracer: trace.Tracer) -> None:
    assert trace.get_current_span() is trace.INVALID_SPAN
    row, with_own = rows(Message(TOPIC, b"{}"), Message(TOPIC, b"{}", headers={"a": "b"}))
    assert row.headers is None  # still NULL, which the claim's per-row check skips
    assert headers_of(with_own) == {"a": "b"}
    # After a span has ended, nothing is current again.
    with tracer.start_as_current_span("done"):
        pass
    assert rows(Message(TOPIC, b"{}"))[0].headers is None


def test_an_invalid_span_adds_nothing(tracer: trace.Tracer) -> None:
    with trace.use_span(trace.INVALID_SPAN):
        assert rows(Message(TOPIC, b"{}"))[0].headers is None
    # A span whose context is invalid (zero trace id) though it claims to be sampled.
    bad = SpanContext(0, 0x00F067AA0BA902B7, is_remote=True,
                      trace_flags=TraceFlags(TraceFlags.SAMPLED))
    with trace.use_span(NonRecordingSpan(bad)):
        assert rows(Message(TOPIC, b"{}"))[0].headers is None


def test_a_valid_span_that_does_not_record_is_propagated_unsampled(
    exporter: InMemorySpanExporter,
) -> None:
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("sampled-out").start_as_current_span("dropped") as span:
        assert not span.is_recording() and span.get_span_context().is_valid
        row, = rows(Message(TOPIC, b"{}"))
    assert exporter.get_finished_spans() == ()
    assert headers_of(row) == {"traceparent": traceparent(span)}
    # Not sampled, and said so (the low bit; the SDK may set W3C's random bit 0x02).
    assert not int(headers_of(row)["traceparent"].rsplit("-", 1)[1], 16) & 1
    # A remote context made current as it is (no local span started) is propagated too.
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1))
    with trace.use_span(NonRecordingSpan(remote)):
        row, = rows(Message(TOPIC, b"{}"))
    assert headers_of(row)["traceparent"] == f"00-{0xABC:032x}-{0xDEF:016x}-01"


def test_publish_many_gives_every_message_the_same_context(tracer: trace.Tracer) -> None:
    with tracer.start_as_current_span("batch") as span:
        got = rows(*(Message(TOPIC, f"v{i}", key=f"k{i}") for i in range(3)))
    assert {headers_of(r)["traceparent"] for r in got} == {traceparent(span)}


def test_switched_off_per_call(tracer: trace.Tracer) -> None:
    with tracer.start_as_current_span("quiet"):
        row, = rows(Message(TOPIC, b"{}"), trace_context=False)
        assert row.headers is None
        with pytest.raises(PublishError, match="trace_context must be a bool"):
            rows(Message(TOPIC, b"{}"), trace_context=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["off", "OFF", " off ", "0", "false", "no"])
def test_switched_off_for_the_process(tracer: trace.Tracer, monkeypatch: pytest.MonkeyPatch,
                                      value: str) -> None:
    monkeypatch.setenv(relay_trace.SWITCH, value)
    with tracer.start_as_current_span("quiet"):
        assert rows(Message(TOPIC, b"{}"))[0].headers is None


@pytest.mark.parametrize("value", ["", "on", "1", "true", "yes", "ON"])
def test_switched_on_for_the_process(tracer: trace.Tracer, monkeypatch: pytest.MonkeyPatch,
                                     value: str) -> None:
    monkeypatch.setenv(relay_trace.SWITCH, value)
    with tracer.start_as_current_span("loud") as span:
        assert headers_of(rows(Message(TOPIC, b"{}"))[0]) == {"traceparent": traceparent(span)}


def test_a_switch_value_neither_on_nor_off_is_refused(
    tracer: trace.Tracer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(relay_trace.SWITCH, "disabled")
    with tracer.start_as_current_span("typo"), pytest.raises(PublishError, match="disabled"):
        rows(Message(TOPIC, b"{}"))
    # Per call off: the switch is not read at all.
    with tracer.start_as_current_span("typo"):
        assert rows(Message(TOPIC, b"{}"), trace_context=False)[0].headers is None


@pytest.mark.parametrize("own", [
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    {"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    {"tracestate": "rojo=00f067aa0ba902b7"},
])
def test_the_callers_own_trace_context_is_kept_and_nothing_added(
    tracer: trace.Tracer, own: dict[str, str],
) -> None:
    state = TraceState([("congo", "t61rcWkgMzE")])
    upstream = SpanContext(0x1, 0x2, is_remote=True, trace_flags=TraceFlags(1),
                           trace_state=state)
    with tracer.start_as_current_span("own", context=trace.set_span_in_context(
            NonRecordingSpan(upstream))):
        row, = rows(Message(TOPIC, b"{}", headers={**own, "x": "y"}))
    # Neither header of the current span: a tracestate beside another trace's
    # traceparent would be wrong, and so would a second traceparent in another case.
    assert headers_of(row) == {**own, "x": "y"}


def test_the_trace_context_counts_in_the_size_check(tracer: trace.Tracer) -> None:
    message = Message(TOPIC, b"x" * 100, key="k", headers={"app": "shop"})
    bare, = rows(message)
    exact = Limits(limits().header_prefix, bare.size, limits().source_name)
    assert rows(message, limit=exact) == [bare]  # fits exactly with no span
    with tracer.start_as_current_span("big") as span:
        traced, = rows(message, limit=Limits(exact.header_prefix, 10_000, exact.source_name))
        # traceparent is 55 characters; in the JSON text with its name, quotes and ", ".
        added = len(', "traceparent": ""') + len(traceparent(span))
        assert traced.size == bare.size + added
        with pytest.raises(InvalidMessageError, match=(
                rf"message 0: message is {bare.size + added} bytes, over the limit of "
                rf"{bare.size} \(trace context included: {added} bytes; "
                r"trace_context=False leaves it out\)")):
            rows(message, limit=exact)
        assert rows(message, limit=exact, trace_context=False) == [bare]


def test_not_added_under_a_reserved_prefix_that_covers_its_names(tracer: trace.Tracer) -> None:
    # The relay refuses a row with a user header under its prefix: a prefix that covers
    # "traceparent" leaves the trace context out rather than make a poison message.
    covering = Limits("trace", 10_000, "outbox-relay")
    with tracer.start_as_current_span("odd prefix"):
        row, = rows(Message(TOPIC, b"{}", headers={"app": "shop"}), limit=covering)
        assert headers_of(row) == {"app": "shop"}
        assert "traceparent" in headers_of(rows(Message(TOPIC, b"{}"))[0])




def test_without_opentelemetry_installed_nothing_changes() -> None:
    code = BLOCK_OPENTELEMETRY + textwrap.dedent("""
        import json
        import outbox_relay
        from outbox_relay.outbox import trace
        from outbox_relay.outbox.checks import Message, checked_rows, limits

        loaded_by_import = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        rows = checked_rows([Message("t", b"v", headers={"a": "b"}), Message("t", b"v")],
                            limits(), numbered=True, trace_context=True)
        print(json.dumps({
            "loaded_by_import": loaded_by_import,
            "asked": Blocker.asked,
            "headers": [r.headers for r in rows],
            "trace_headers": trace.trace_headers(),
            "loaded": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
        }))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    got = json.loads(out.stdout)
    assert got["loaded_by_import"] == []
    assert got["asked"] >= 1, "the publish did not try to import opentelemetry"
    assert got["headers"] == ['{"a": "b"}', None]
    assert got["trace_headers"] == {}
    assert got["loaded"] == []


def test_import_relay_loads_no_opentelemetry_until_a_publish_asks() -> None:
    code = textwrap.dedent("""
        import sys
        import outbox_relay
        from outbox_relay.outbox.checks import Message, checked_rows, limits

        def loaded():
            return any(m.split(".")[0] == "opentelemetry" for m in sys.modules)

        before = loaded()
        checked_rows([Message("t", b"v")], limits(), numbered=False, trace_context=False)
        off = loaded()
        checked_rows([Message("t", b"v")], limits(), numbered=False, trace_context=True)
        print(before, off, loaded())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "False", "True"]

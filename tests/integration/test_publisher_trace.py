"""Trace context end to end: an application publishes inside an OpenTelemetry span, the
relay sends the row from the real PostgreSQL to the real Kafka, and a consumer extracts
the W3C context from the record's headers and continues the trace: its span has the
publisher's trace id and the publisher's span as parent (the SDK's in-memory exporter
says so). Messages published with no span, with trace_context=False, or with the
caller's own traceparent carry no context of the publisher's span."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg2
import pytest
import sqlalchemy as sa
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
    TraceState,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

import outbox_relay
from outbox_relay import Message
from outbox_relay.outbox.trace import SWITCH
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import consume, create_topics, unique
from tests.without_opentelemetry import BLOCK_OPENTELEMETRY

pytestmark = pytest.mark.integration

ADAPTERS = ["psycopg2", "psycopg", "sqlalchemy-session"]
PREFIX = "outbox-relay."  # the relay's default, which make_config keeps
CALLERS_OWN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
# psycopg's spans continue an upstream trace that carries a tracestate.
UPSTREAM = SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED),
                       trace_state=TraceState([("shop", "t61rcWkgMzE")]))


@dataclass(frozen=True)
class Sent:
    message: Message
    span_id: int | None  # the publisher's span whose context the record must carry
    trace_id: int | None
    flags: int = 0
    tracestate: str | None = None


@contextmanager
def transaction(adapter: str, url: str) -> Iterator[Any]:
    """A connection object of `adapter` inside a transaction, committed at the end."""
    if adapter == "sqlalchemy-session":
        engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg2://", 1),
                                  poolclass=NullPool)
        try:
            with Session(engine) as session, session.begin():
                yield session
        finally:
            engine.dispose()
        return
    conn = psycopg2.connect(url) if adapter == "psycopg2" else psycopg.connect(url)
    try:
        yield conn
        conn.commit()
    finally:
        conn.close()


def key_shapes(topic: str, tag: str) -> list[Message]:
    return [
        Message(topic, f"{tag}:none", key=None),
        Message(topic, f"{tag}:binary".encode(), key=bytes([0, 255, 128, 10]),
                headers={"app": "shop"}),
        Message(topic, f"{tag}:grouped", key="order-42", partition_key="customer-7"),
    ]


def test_a_consumer_continues_the_publishers_trace(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SWITCH, raising=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test_publisher_trace")
    topic = unique("traced")
    create_topics(stack.kafka_bootstrap, {topic: 3})

    sent: dict[int, Sent] = {}
    for adapter in ADAPTERS:
        with transaction(adapter, migrated_url) as conn:
            upstream = (set_span_in_context(NonRecordingSpan(UPSTREAM))
                        if adapter == "psycopg" else None)
            with tracer.start_as_current_span(f"place order ({adapter})",
                                              context=upstream) as span:
                ctx = span.get_span_context()
                state = ctx.trace_state.to_header() or None
                first, *rest = key_shapes(topic, adapter)
                ids = [outbox_relay.publish(conn, topic, first.value, key=first.key)]
                ids += outbox_relay.publish_many(conn, rest)
                for i, m in zip(ids, [first, *rest], strict=True):
                    sent[i] = Sent(m, ctx.span_id, ctx.trace_id, int(ctx.trace_flags), state)
                # Switched off per call, and the caller's own traceparent, in the span.
                off = Message(topic, f"{adapter}:off", key=b"k-off")
                own = Message(topic, f"{adapter}:own", key=None,
                              headers={"traceparent": CALLERS_OWN})
                i_off, = outbox_relay.publish_many(conn, [off], trace_context=False)
                i_own = outbox_relay.publish(conn, topic, own.value, headers=own.headers)
                sent[i_off], sent[i_own] = Sent(off, None, None), Sent(own, None, None)
            # After the span: nothing current, no trace context.
            after = Message(topic, f"{adapter}:after", key="order-43", partition_key="c-9")
            sent[outbox_relay.publish(conn, topic, after.value, key=after.key,
                               partition_key=after.partition_key)] = Sent(after, None, None)
    sent.update(_published_without_opentelemetry(migrated_url, topic))

    result = run_relay(make_config([topic]))

    assert result.exit_code == EXIT_OK
    got = consume(stack.kafka_bootstrap, [topic], expect=len(sent))
    assert sorted(r.outbox_id for r in got) == sorted(sent), "lost or duplicated"
    publisher_spans = {s.context.span_id: s for s in exporter.get_finished_spans()
                       if s.context is not None}
    assert len(publisher_spans) == len(ADAPTERS)
    exporter.clear()

    propagator = TraceContextTextMapPropagator()
    continued: dict[int, int] = {}  # outbox id -> the publisher's span id it continued
    for r in got:
        s = sent[r.outbox_id]
        m = s.message
        assert r.value == (m.value.encode() if isinstance(m.value, str) else m.value)
        assert r.key == (m.key.encode() if isinstance(m.key, str) else m.key)
        # The consumer's side: the record's headers as text, the W3C context out of them.
        carrier = {name: value.decode() for name, value in r.headers.items()}
        user = {k: v for k, v in carrier.items() if not k.startswith(PREFIX)}
        if s.span_id is None:
            assert user.get("traceparent") == (m.headers or {}).get("traceparent"), r
            assert user == dict(m.headers or {})
            continue
        assert s.trace_id is not None
        assert user == {**(m.headers or {}),
                        "traceparent": f"00-{s.trace_id:032x}-{s.span_id:016x}-{s.flags:02x}",
                        **({"tracestate": s.tracestate} if s.tracestate else {})}
        with tracer.start_as_current_span(
                f"process {r.outbox_id}", context=propagator.extract(carrier),
                kind=SpanKind.CONSUMER, attributes={"outbox.id": r.outbox_id}):
            pass
        continued[r.outbox_id] = s.span_id
    assert len(continued) == 3 * len(ADAPTERS)

    consumers = exporter.get_finished_spans()
    assert len(consumers) == len(continued)
    for consumer in consumers:
        assert consumer.attributes is not None and consumer.context is not None
        outbox_id = consumer.attributes["outbox.id"]
        assert isinstance(outbox_id, int)
        publisher = publisher_spans[continued[outbox_id]]
        assert publisher.context is not None
        assert consumer.context.trace_id == publisher.context.trace_id
        assert consumer.parent is not None and consumer.parent.is_remote
        assert consumer.parent.span_id == publisher.context.span_id
        assert consumer.context.trace_state == publisher.context.trace_state
    assert sum(1 for s in sent.values() if s.tracestate == "shop=t61rcWkgMzE") == 3
    assert sum(1 for s in sent.values() if s.trace_id == UPSTREAM.trace_id) == 3
    one = next(r for r in got if sent[r.outbox_id].tracestate is not None
               and r.key is not None and r.key.startswith(b"\x00"))
    print(f"\nthe consumer's view of outbox id {one.outbox_id}: topic {one.topic} "
          f"partition {one.partition} offset {one.offset} key {one.key!r} value {one.value!r}")
    for name, value in sorted(one.headers.items()):
        print(f"  {name}: {value!r}")
    provider.shutdown()


_PUBLISH_WITHOUT_OPENTELEMETRY = BLOCK_OPENTELEMETRY + textwrap.dedent("""
    import json

    import psycopg2
    import outbox_relay

    url, topic = sys.argv[1], sys.argv[2]
    with psycopg2.connect(url) as conn:
        ids = outbox_relay.publish_many(conn, [
            outbox_relay.Message(topic, "plain:none", key=None),
            outbox_relay.Message(topic, b"plain:binary", key=b"\\x00\\x01", headers={"app":
        "shop"}), ])
    print(json.dumps({"ids": ids, "asked": Blocker.asked,
                      "loaded": [m for m in sys.modules if m.startswith("opentelemetry")]}))
""")


def _published_without_opentelemetry(url: str, topic: str) -> dict[int, Sent]:
    """Two messages published by a process where opentelemetry cannot be imported."""
    out = subprocess.run([sys.executable, "-c", _PUBLISH_WITHOUT_OPENTELEMETRY, url, topic],
                         capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["asked"] >= 1 and got["loaded"] == [], got
    messages = [Message(topic, "plain:none", key=None),
                Message(topic, b"plain:binary", key=b"\x00\x01", headers={"app": "shop"})]
    return {i: Sent(m, None, None) for i, m in zip(got["ids"], messages, strict=True)}

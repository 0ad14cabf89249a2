"""One record with both of the publisher's additions, on the real stack: published inside
an OpenTelemetry span with event_type=/content_type= to a CloudEvents topic. The consumer
reads it back as a CloudEvent (the SDK's Kafka binding) AND continues the trace from the
same headers (the W3C propagator): the two sets of headers travel side by side."""

from __future__ import annotations

import psycopg2
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import outbox_relay
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import consume, create_topics, unique
from tests.integration.test_cloudevents import event

pytestmark = pytest.mark.integration


def test_a_traced_cloudevent_carries_both_to_the_consumer(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
) -> None:
    topic = unique("traced-ce")
    create_topics(stack.kafka_bootstrap, {topic: 3})
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("shop")
    conn = psycopg2.connect(migrated_url)
    try:
        with tracer.start_as_current_span("place order") as span, conn:
            outbox_id = outbox_relay.publish(conn, topic, b'{"id": 42}', key=b"\x00order-42",
                                      partition_key="customer-7", headers={"tenant": "eu"},
                                      event_type="com.example.order.created",
                                      content_type="application/json")
    finally:
        conn.close()
    config = make_config([topic], relay={"topic_rules": [{"match": topic, "cloudevents": True}]})

    assert run_relay(config).exit_code == EXIT_OK

    [record] = consume(stack.kafka_bootstrap, [topic], expect=1)
    print(f"\ntopic {record.topic} partition {record.partition} offset {record.offset} "
          f"key {record.key!r} value {record.value!r}")
    for name, value in record.headers.items():
        print(f"  {name}: {value!r}")
    assert record.outbox_id == outbox_id
    e = event(record)
    assert (e["type"], e["id"], e["source"], e["datacontenttype"]) == (
        "com.example.order.created", str(outbox_id), config.relay.source_name,
        "application/json")
    assert record.headers["tenant"] == b"eu"
    carrier = {name: value.decode() for name, value in record.headers.items()}
    context = TraceContextTextMapPropagator().extract(carrier)
    with tracer.start_as_current_span("handle order", context=context) as consumer:
        pass
    published = span.get_span_context()
    assert consumer.get_span_context().trace_id == published.trace_id
    assert consumer.parent is not None and consumer.parent.span_id == published.span_id
    assert {s.name for s in exporter.get_finished_spans()} == {"place order", "handle order"}

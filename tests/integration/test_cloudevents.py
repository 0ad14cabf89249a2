"""CloudEvents on the wire, on the real stack: published with event_type=/content_type=,
sent by a relay whose topic rule sets `cloudevents = true`, read back by a consumer and
converted by the CloudEvents SDK's Kafka binding; a row without a type is a problem found
before sending, under either policy; the added attributes count in the size check."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import psycopg2
import pytest
from cloudevents.kafka import KafkaMessage, from_binary

import outbox_relay
from outbox_relay.config import TopicRule
from outbox_relay.outbox.checks import jsonb_text
from outbox_relay.rules import cloudevents as ce
from outbox_relay.rules.cloudevent_topics import allowance
from outbox_relay.rules.record_size import payload_allowance, payload_size
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_LEFT_OVER, EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import consume, create_topics, query, unique
from tests.kafka_readback import Received

pytestmark = pytest.mark.integration

PREFIX = "outbox-relay."
DEFAULT_TYPE = "com.example.default"


@dataclass(frozen=True)
class Pub:
    topic: str
    value: bytes
    key: bytes | str | None = None
    partition_key: str | None = None
    event_type: str | None = None
    content_type: str | None = None


def publish(url: str, pubs: list[Pub]) -> dict[int, tuple[Pub, dt.datetime]]:
    """Each message in a transaction of its own; the id's message and created_at (UTC)."""
    out: dict[int, tuple[Pub, dt.datetime]] = {}
    conn = psycopg2.connect(url)
    try:
        for p in pubs:
            with conn:
                i = outbox_relay.publish(conn, p.topic, p.value, key=p.key,
                                  partition_key=p.partition_key, event_type=p.event_type,
                                  content_type=p.content_type)
                out[i] = (p, dt.datetime.min)
    finally:
        conn.close()
    for i, created in query(url, "SELECT id, created_at FROM kafka_messages"):
        out[i] = (out[i][0], created.replace(tzinfo=dt.UTC))
    return out


def event(record: Received) -> Any:
    message = KafkaMessage(headers=record.headers, key=record.key, value=record.value)
    return from_binary(message, data_unmarshaller=lambda b: b)


def key_shapes(topic: str, **kw: Any) -> list[Pub]:
    return [
        Pub(topic, b"v0", None, None, **kw),  # key NULL
        Pub(topic, b"v1", b"\x00\xffk", None, **kw),  # binary key, partition_key NULL
        Pub(topic, b"v2", "k2", "k2", **kw),  # partition_key equal to the key
        Pub(topic, b"v3", "k3", "group-7", **kw),  # partition_key different
        Pub(topic, b"v4", None, "group-7", **kw),  # partition_key without a key
    ]


def test_a_consumer_reads_each_record_as_a_cloudevent(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
) -> None:
    topic, plain = unique("ce"), unique("plain")
    create_topics(stack.kafka_bootstrap, {topic: 3, plain: 2})
    typed = key_shapes(topic, event_type="com.example.order.created",
                       content_type="application/json")
    defaulted = key_shapes(topic)
    not_ce = [*key_shapes(plain), Pub(plain, b"p", b"k", None, "com.example.plain")]
    rows = publish(migrated_url, [*typed, *defaulted, *not_ce])
    config = make_config([topic, plain], relay={"topic_rules": [
        {"match": topic, "cloudevents": True, "event_type": DEFAULT_TYPE}]})

    assert run_relay(config).exit_code == EXIT_OK

    got = consume(stack.kafka_bootstrap, [topic, plain], expect=len(rows))
    assert sorted(r.outbox_id for r in got) == sorted(rows)
    source = config.relay.source_name
    for record in got:
        pub, created = rows[record.outbox_id]
        assert (record.key, record.value) == (
            pub.key.encode() if isinstance(pub.key, str) else pub.key, pub.value)
        assert {f"{PREFIX}id", f"{PREFIX}source", f"{PREFIX}created-at"} <= set(record.headers)
        if record.topic == plain:
            assert not set(ce.RELAY_ATTRIBUTES) & set(record.headers), record.headers
            assert record.headers.get(ce.CE_TYPE) == (
                pub.event_type.encode() if pub.event_type else None)
            continue
        e = event(record)
        assert e["specversion"] == "1.0"
        assert e["id"] == str(record.outbox_id)
        assert e["source"] == source
        assert e["type"] == (pub.event_type or DEFAULT_TYPE)
        assert dt.datetime.fromisoformat(e["time"]) == created
        assert e.get("datacontenttype") == pub.content_type
        assert e.data == pub.value
        assert record.headers[ce.CE_TIME] == record.headers[f"{PREFIX}created-at"]


def _traffic(topic: str) -> list[Pub]:
    """k1: typed, UNTYPED (the problem), typed after it; k2 typed around them; keyless."""
    t = "com.example.t"
    return [Pub(topic, b"a0", b"k1", None, t), Pub(topic, b"b0", b"k2", None, t),
            Pub(topic, b"untyped", b"k1", None), Pub(topic, b"b1", b"k2", "k2", t),
            Pub(topic, b"a1", "k1", None, t), Pub(topic, b"n0", None, None, t)]


@pytest.mark.parametrize("policy", ["block", "park"])
def test_a_row_without_a_type_is_a_problem_found_before_sending(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    policy: str,
) -> None:
    topic = unique(f"ce-{policy}")
    create_topics(stack.kafka_bootstrap, {topic: 1})
    ids = list(publish(migrated_url, _traffic(topic)))
    config = make_config([topic], relay={"available_now_deadline_s": 1, "topic_rules": [
        {"match": topic, "cloudevents": True, "policy": policy}]})

    result = run_relay(config)

    bad = ids[2]
    says = "has no ce_type header"
    if policy == "block":
        assert result.exit_code == EXIT_LEFT_OVER
        error = query(migrated_url, "SELECT last_error FROM kafka_topic_info WHERE topic = %s",
                      (topic,))[0][0]
        assert f"message {bad}" in error and says in error, error
        got = consume(stack.kafka_bootstrap, [topic], expect=2)
        assert sorted(r.outbox_id for r in got) == ids[:2], "nothing from the problem on"
        left = [i for (i,) in query(migrated_url, "SELECT id FROM kafka_messages ORDER BY id")]
        assert left == ids[2:]
        return
    assert result.exit_code == EXIT_OK
    parked = query(migrated_url, "SELECT id, reason FROM relay_parked_messages ORDER BY id")
    assert [i for i, _ in parked] == [bad, ids[4]], "the problem, and its key after it"
    assert says in parked[0][1]
    got = consume(stack.kafka_bootstrap, [topic], expect=4)
    assert sorted(r.outbox_id for r in got) == [ids[0], ids[1], ids[3], ids[5]]
    assert all(event(r)["type"] == "com.example.t" for r in got)
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0] == 0


def test_a_cloudevent_at_its_allowance_is_sent_and_one_byte_more_is_a_problem(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
) -> None:
    topic, limit = unique("ce-size"), 2_000
    create_topics(stack.kafka_bootstrap, {topic: 1}, **{"max.message.bytes": str(limit)})
    config = make_config([topic], relay={"topic_rules": [
        {"match": topic, "cloudevents": True, "event_type": DEFAULT_TYPE, "policy": "park"}]})
    kafka, settings = config.kafka, config.relay
    plain = payload_allowance(limit, kafka.max_request_size, kafka.compression_type,
                              settings.header_prefix, settings.source_name)
    rule = TopicRule(match=topic, cloudevents=True, event_type=DEFAULT_TYPE)
    most = allowance(plain, settings.source_name, rule)
    assert 0 < most < plain
    own_type = "com.example.sized"
    headers = jsonb_text({ce.CE_TYPE: own_type})
    fits = most - len(b"ka") - len(headers.encode())
    pubs = [Pub(topic, b"x" * fits, b"ka", None, own_type),
            Pub(topic, b"y" * (fits + 1), b"kb", None, own_type),
            Pub(topic, b"x" * (most - 2), b"kc", None)]  # no headers: the default type
    ids = list(publish(migrated_url, pubs))
    sizes = [s for (s,) in query(migrated_url, "SELECT relay_message_size(message, key, "
                                 "headers) FROM kafka_messages ORDER BY id")]
    assert sizes == [most, most + 1, most]
    assert payload_size(pubs[0].value, b"ka", headers) == most

    assert run_relay(config).exit_code == EXIT_OK

    got = consume(stack.kafka_bootstrap, [topic], expect=2)
    assert sorted(r.outbox_id for r in got) == [ids[0], ids[2]], "at the allowance: sent"
    assert [event(r)["type"] for r in sorted(got, key=lambda r: r.offset)] == [
        own_type, DEFAULT_TYPE]
    parked = query(migrated_url, "SELECT id, reason FROM relay_parked_messages")
    assert parked == [(ids[1], f"message is {most + 1} bytes, over the limit of {most}")]

"""The publisher's pure parts: its imports, its defaults, its checks and its pages."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import outbox_relay
from outbox_relay.config import KafkaConfig, RelaySettings
from outbox_relay.control import kafka_admin
from outbox_relay.errors import InvalidMessageError, PublishError, RelayError
from outbox_relay.outbox.checks import Limits, Message, limits, outbox_row
from outbox_relay.outbox.statement import PAGE_BYTES, PAGE_ROWS, pages
from outbox_relay.rules.record_size import KAFKA_DEFAULT_MAX_MESSAGE_BYTES, payload_allowance
from outbox_relay.rules.topic_names import topic_name_problem


def test_importing_the_publisher_loads_no_spark_kafka_client_or_driver() -> None:
    code = textwrap.dedent("""
        import sys
        import outbox_relay
        from outbox_relay import Message, publish, publish_async, publish_many, publish_many_async
        import outbox_relay.outbox.publisher
        import outbox_relay.outbox.publisher_async
        outbox_relay.outbox.checks.limits()  # the relay's defaults, without its config models
        heavy = ("pyspark", "py4j", "confluent_kafka", "psycopg2", "psycopg", "sqlalchemy",
                 "asyncpg", "delta", "deltalake", "opentelemetry",  # OpenTelemetry: at a publish
                 "pydantic", "pydantic_settings", "prometheus_client")
        print(sorted(m for m in sys.modules if m.split(".")[0] in heavy))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_relay_exports_the_publisher() -> None:
    assert outbox_relay.publish.__module__ == "outbox_relay.outbox.publisher"
    assert outbox_relay.publish_many.__module__ == "outbox_relay.outbox.publisher"
    assert outbox_relay.Message is Message


def test_defaults_are_the_relays() -> None:
    settings, kafka = RelaySettings(), KafkaConfig()
    expected = payload_allowance(KAFKA_DEFAULT_MAX_MESSAGE_BYTES, kafka.max_request_size,
                                 kafka.compression_type, settings.header_prefix,
                                 settings.source_name)
    assert limits() == Limits(settings.header_prefix, expected, settings.source_name)
    # Another prefix changes the reserved headers' bytes, and so the allowance.
    assert limits(header_prefix="p" * 60 + ".").max_bytes < expected
    assert limits(header_prefix="acme.", max_bytes=10) == Limits("acme.", 10, "outbox-relay")


@pytest.mark.parametrize("bad", [{"header_prefix": ""}, {"header_prefix": 3},
                                 {"max_bytes": -1}, {"max_bytes": True}, {"max_bytes": 1.5}])
def test_bad_limits_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(PublishError, match=next(iter(bad))):
        limits(**bad)  # type: ignore[arg-type]


def test_the_topic_rule_is_one_definition() -> None:
    assert kafka_admin.topic_name_problem is topic_name_problem
    assert topic_name_problem("orders\n") is not None, "a trailing newline is no legal name"
    assert topic_name_problem("a" * 249) is None and topic_name_problem("a" * 250) is not None


def test_sizes_count_utf8_bytes_and_the_json_text_of_headers() -> None:
    message = Message("t", "é", key="ключ", partition_key="ignored", headers={"a": "\n"})
    row = outbox_row(message, limits("p.", 1_000))
    assert row.message == "é".encode() and row.key == "ключ".encode()
    assert row.headers is not None and row.size == 2 + 8 + len('{"a": "\\n"}')
    assert outbox_row(message, limits("p.", row.size)) == row
    with pytest.raises(InvalidMessageError, match=f"message is {row.size} bytes, over the limit"):
        outbox_row(message, limits("p.", row.size - 1))


def test_empty_headers_are_stored_as_null_and_binary_values_kept() -> None:
    row = outbox_row(Message("t", b"\x00\xff", key=b"", headers={}), limits("p.", 10))
    assert (row.message, row.key, row.headers, row.size) == (b"\x00\xff", b"", None, 2)


@pytest.mark.parametrize(("message", "words"), [
    (Message("t", "\ud800"), "value is not valid Unicode"),
    (Message("t", b"v", key="\udfff"), "key is not valid Unicode"),
    (Message("t", b"v", partition_key="\ud800"), "partition_key is not valid Unicode"),
    (Message("t", b"v", partition_key="a\x00"), "partition_key contains a NUL"),
    (Message("t", b"v", headers={1: "a"}), "header names must be str, not int"),  # type: ignore[dict-item]
    (Message("t", b"v", headers={"a": b"b"}), "'a' is bytes"),  # type: ignore[dict-item]
    (Message(b"t", b"v"), "topic must be str, not bytes"),  # type: ignore[arg-type]
    (Message("", b"v"), "topic name '' is illegal"),
    (Message("..", b"v"), "is not allowed"),
    (Message("t", bytearray(b"v")), "value must be bytes, str or None, not bytearray"),  # type: ignore[arg-type]
])
def test_each_bad_field_is_named(message: Message, words: str) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        outbox_row(message, limits("p.", 1_000))
    assert words in str(caught.value)
    assert isinstance(caught.value, RelayError)


def test_pages_keep_order_and_bound_rows_and_bytes() -> None:
    small = [outbox_row(Message("t", str(i)), limits("p.", 10)) for i in range(2 * PAGE_ROWS + 1)]
    cut = list(pages(small))
    assert [len(p) for p in cut] == [PAGE_ROWS, PAGE_ROWS, 1]
    assert [r for p in cut for r in p] == small
    big = [outbox_row(Message("t", b"x" * (PAGE_BYTES // 3 + 1)), limits("p.", PAGE_BYTES))
           for _ in range(4)]
    assert [len(p) for p in pages(big)] == [2, 2]
    huge = [outbox_row(Message("t", b"x" * (PAGE_BYTES + 1)), limits("p.", 2 * PAGE_BYTES))]
    assert [len(p) for p in pages(huge)] == [1], "a row over the page's bytes goes alone"


def test_an_unknown_connection_type_is_refused_before_anything_else() -> None:
    with pytest.raises(PublishError, match=r"cannot publish through a builtins\.object"):
        outbox_relay.publish(object(), "t", b"v")

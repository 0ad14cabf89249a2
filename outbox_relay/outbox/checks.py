"""What the relay would refuse in a message, checked before an application writes it.

Each rule is the relay's own: the topic name (outbox_relay.rules.topic_names), the reserved
header prefix and the size allowance (outbox_relay.rules.record_size) with the relay's
defaults (which outbox_relay.rules.headers and record_size hold for the config models too),
and the header rules and size measure of the SQL function relay_message_problem (schemas
0007, 0009, 0015), which Python mirrors here with the size and reserved-name rules of
outbox_relay.rules. The mirror is pinned to the SQL by a test against the real PostgreSQL
(tests/integration/test_publisher_rules.py). Nothing here imports a driver or pydantic:
the base install has neither.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from outbox_relay.errors import InvalidMessageError, PublishError
from outbox_relay.outbox import trace
from outbox_relay.rules import cloudevents as ce
from outbox_relay.rules.headers import DEFAULT_HEADER_PREFIX, DEFAULT_SOURCE_NAME, is_reserved
from outbox_relay.rules.record_size import (
    DEFAULT_COMPRESSION,
    DEFAULT_MAX_REQUEST_SIZE,
    KAFKA_DEFAULT_MAX_MESSAGE_BYTES,
    payload_allowance,
    payload_size,
)
from outbox_relay.rules.topic_names import topic_name_problem


@dataclass(frozen=True)
class Message:
    """One message for publish_many; the fields mean what publish's arguments mean."""

    topic: str
    value: bytes | str | None
    key: bytes | str | None = None
    partition_key: str | None = None
    headers: Mapping[str, str] | None = None
    event_type: str | None = None
    content_type: str | None = None


@dataclass(frozen=True)
class OutboxRow:
    """A checked message as the columns of kafka_messages hold it."""

    topic: str
    message: bytes | None
    key: bytes | None
    partition_key: str | None
    headers: str | None  # JSON text of an object of strings; None for no headers

    @property
    def size(self) -> int:
        """The relay's measure of this row (outbox_relay.rules.record_size.payload_size)."""
        return payload_size(self.message, self.key, self.headers)


@dataclass(frozen=True)
class Limits:
    header_prefix: str
    max_bytes: int
    source_name: str  # the relay's default: ce_source carries it on a CloudEvents topic


def limits(header_prefix: str | None = None, max_bytes: int | None = None) -> Limits:
    """The caller's limits, each defaulting to what a relay with its default config applies
    to a topic with Kafka's default max.message.bytes."""
    prefix, source_name = DEFAULT_HEADER_PREFIX, DEFAULT_SOURCE_NAME
    if header_prefix is not None:
        if not isinstance(header_prefix, str) or not header_prefix:
            raise PublishError(f"header_prefix must be a non-empty str, not {header_prefix!r}")
        prefix = header_prefix
    if max_bytes is None:
        max_bytes = payload_allowance(KAFKA_DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_REQUEST_SIZE,
                                      DEFAULT_COMPRESSION, prefix, source_name)
    elif isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise PublishError(f"max_bytes must be a non-negative int, not {max_bytes!r}")
    return Limits(prefix, max_bytes, source_name)


def jsonb_text(headers: Mapping[str, str]) -> str:
    """JSON text of as many UTF-8 bytes as PostgreSQL's `headers::jsonb::text`.

    jsonb prints ", " and ": " between items, escapes only '"', '\\' and characters below
    U+0020, and writes every other character as itself; only the order of keys differs
    (jsonb sorts them), which leaves the length alone.
    """
    return json.dumps(dict(headers), ensure_ascii=False, separators=(", ", ": "))


def _text_problem(what: str, text: str) -> str | None:
    if "\x00" in text:  # PostgreSQL's text and jsonb cannot hold U+0000
        return f"{what} contains a NUL character, which PostgreSQL cannot store"
    try:
        text.encode()
    except UnicodeEncodeError:
        return f"{what} is not valid Unicode (a lone surrogate)"
    return None


def header_problem(headers: object, prefix: str) -> str | None:
    """Why the relay refuses these headers, or None: the checks of relay_message_problem
    (an object, no name under the reserved prefix, string values), and what PostgreSQL
    cannot store."""
    if not isinstance(headers, Mapping):
        return f"headers must be a mapping of str to str, not {type(headers).__name__}"
    for name in headers:
        if not isinstance(name, str):
            return f"header names must be str, not {type(name).__name__} ({name!r})"
        if (problem := _text_problem(f"header name {name!r}", name)) is not None:
            return problem
        if is_reserved(name, prefix):
            return f"header name {name!r} uses the reserved prefix {prefix}"
    for name, value in headers.items():
        if not isinstance(value, str):
            return f"header values must be strings: {name!r} is {type(value).__name__}"
        if (problem := _text_problem(f"the value of header {name!r}", value)) is not None:
            return problem
    return None


def _as_bytes(field: str, value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return value.encode()  # a bytea column holds any byte, NUL included
        except UnicodeEncodeError:
            raise InvalidMessageError(f"{field} is not valid Unicode (a lone surrogate)") \
                from None
    raise InvalidMessageError(f"{field} must be bytes, str or None, not {type(value).__name__}")


def outbox_row(message: Message, limits: Limits,
               context: Mapping[str, str] | None = None) -> OutboxRow:
    """The row for this message, or InvalidMessageError naming what the relay would refuse.

    `context` is the trace context (outbox_relay.outbox.trace) to add to the message's headers,
    unless the application set traceparent or tracestate itself (trace.for_message)."""
    topic = message.topic
    if not isinstance(topic, str):
        raise InvalidMessageError(f"topic must be str, not {type(topic).__name__}")
    if (problem := topic_name_problem(topic)) is not None:
        raise InvalidMessageError(problem)
    value = _as_bytes("value", message.value)
    key = _as_bytes("key", message.key)
    pk = message.partition_key
    if pk is not None:
        if not isinstance(pk, str):
            raise InvalidMessageError(f"partition_key must be str or None, not {type(pk).__name__}")
        if (problem := _text_problem("partition_key", pk)) is not None:
            raise InvalidMessageError(problem)
    headers = None
    if message.headers is not None and (
            problem := header_problem(message.headers, limits.header_prefix)) is not None:
        raise InvalidMessageError(problem)
    # What is merged in is checked where it is made: strings, under no reserved name.
    traced = trace.for_message(context or {}, message.headers, limits.header_prefix)
    merged = {**traced, **(message.headers or {}), **_cloudevent_headers(message)}
    if merged:
        # No headers are stored as NULL: the relay's claim checks a row with headers
        # row by row, which it can skip for NULL.
        headers = jsonb_text(merged)
    row = OutboxRow(topic, value, key, pk, headers)
    # A CloudEvent's record also carries the attributes the relay writes on its topic.
    added = ce.added_header_bytes(limits.source_name) if message.event_type is not None else 0
    if row.size + added > limits.max_bytes:  # relay_message_problem's own words
        raise InvalidMessageError(
            f"message is {row.size + added} bytes, over the limit of {limits.max_bytes}"
            + (f" (CloudEvents attributes included: {added} bytes)" if added else "")
            + (f" (trace context included: {row.size - _without(row, traced)} bytes; "
               "trace_context=False leaves it out)" if traced else ""))
    return row


def _without(row: OutboxRow, names: Mapping[str, str]) -> int:
    """The size of `row` without the headers `names` (for an error's words only)."""
    rest = {k: v for k, v in json.loads(row.headers or "{}").items() if k not in names}
    return OutboxRow(row.topic, row.message, row.key, row.partition_key,
                     jsonb_text(rest) if rest else None).size


def _cloudevent_headers(message: Message) -> dict[str, str]:
    """The headers `event_type` and `content_type` stand for (outbox_relay.rules.cloudevents)."""
    given = {ce.CE_TYPE: message.event_type, ce.CONTENT_TYPE: message.content_type}
    added: dict[str, str] = {}
    own = message.headers or {}
    for (name, value), arg in zip(given.items(), ("event_type", "content_type"), strict=True):
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise InvalidMessageError(f"{arg} must be a non-empty str, not {value!r}")
        if (problem := _text_problem(arg, value)) is not None:
            raise InvalidMessageError(problem)
        if own.get(name, value) != value:
            raise InvalidMessageError(
                f"{arg}={value!r} and the header {name!r}={own[name]!r} disagree")
        added[name] = value
    if message.event_type is not None and (taken := sorted(set(own) & set(ce.RELAY_ATTRIBUTES))):
        raise InvalidMessageError(
            f"header {taken[0]!r} is written by the relay on a CloudEvent: "
            "remove it from headers")
    return added


def checked_rows(messages: Iterable[Message], limits: Limits, numbered: bool,
                 trace_context: bool) -> list[OutboxRow]:
    """The rows for `messages`, every one checked before any is written: the one step
    that the sync and async publishers share. InvalidMessageError names the message by
    its index when `numbered` (publish_many)."""
    context = trace.trace_headers() if trace.enabled(trace_context) else {}
    rows: list[OutboxRow] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise InvalidMessageError(
                f"message {i}: must be a outbox_relay.Message, not {type(message).__name__}")
        try:
            rows.append(outbox_row(message, limits, context))
        except InvalidMessageError as exc:
            raise (InvalidMessageError(f"message {i}: {exc}") if numbered else exc) from None
    return rows

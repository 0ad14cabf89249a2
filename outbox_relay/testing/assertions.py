"""Assertions on what the current transaction published (outbox_relay.testing.outbox reads it).

A failed assertion says what was expected and lists what the transaction published
instead (topic, key, value preview, headers), so a failing application test reads at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from outbox_relay.testing.outbox import PublishedMessage, published, published_async


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY: Any = _Any()  # the default of every criterion: not checked
PREVIEW = 80  # bytes of a value shown in a failure message

ValueSpec = (bytes | str | re.Pattern[str] | re.Pattern[bytes]
             | Callable[[bytes | None], bool] | None)


@dataclass(frozen=True)
class Criteria:
    topic: Any
    key: Any
    value: Any
    json: Any
    headers: Mapping[str, str] | None
    partition_key: Any
    event_type: Any

    def matches(self, m: PublishedMessage) -> bool:
        return (_equal(self.topic, m.topic) and _equal(_utf8(self.key), m.key)
                and _value_matches(self.value, m.value) and _json_matches(self.json, m)
                and all(m.headers.get(k) == v for k, v in (self.headers or {}).items())
                and _equal(self.partition_key, m.partition_key)
                and _equal(self.event_type, m.event_type))

    def describe(self) -> str:
        shown = [f"{name}={value!r}" for name, value in vars(self).items()
                 if value is not ANY and not (name == "headers" and value is None)]
        return ", ".join(shown) if shown else "any message"


class Outbox:
    """The `outbox` fixture: assertions on what the current transaction of a connection
    wrote to kafka_messages. Each *_async method is the same for an async connection."""

    def published(self, conn: Any, topic: str | None = None) -> list[PublishedMessage]:
        """The messages the current transaction published (to `topic`, if given)."""
        return [m for m in published(conn) if topic is None or m.topic == topic]

    async def published_async(self, conn: Any,
                              topic: str | None = None) -> list[PublishedMessage]:
        return [m for m in await published_async(conn) if topic is None or m.topic == topic]

    def assert_published(self, conn: Any, topic: str = ANY, *, key: bytes | str | None = ANY,
                         value: ValueSpec = ANY, json: Any = ANY,
                         headers: Mapping[str, str] | None = None, partition_key: Any = ANY,
                         event_type: Any = ANY, count: int | None = None,
                         ) -> list[PublishedMessage]:
        """Asserts the transaction published a message with all of these, and returns
        the messages that match (exactly `count` of them, if given; else at least one).

        `key` equals (str as UTF-8; None: keyless). `value` equals bytes or str (as UTF-8),
        or is a compiled regex searched in the value (a str pattern in the value decoded
        as UTF-8), or a callable given the value that returns true. `json` equals the value
        parsed as JSON. `headers` are contained in the message's headers. `event_type` is
        publish's `event_type=`. A criterion not given is not checked.
        """
        __tracebackhide__ = True
        criteria = Criteria(topic, key, value, json, headers, partition_key, event_type)
        return _check(criteria, count, published(conn))

    async def assert_published_async(self, conn: Any, topic: str = ANY, *,
                                     key: bytes | str | None = ANY, value: ValueSpec = ANY,
                                     json: Any = ANY, headers: Mapping[str, str] | None = None,
                                     partition_key: Any = ANY, event_type: Any = ANY,
                                     count: int | None = None) -> list[PublishedMessage]:
        __tracebackhide__ = True
        criteria = Criteria(topic, key, value, json, headers, partition_key, event_type)
        return _check(criteria, count, await published_async(conn))

    def assert_nothing_published(self, conn: Any, topic: str | None = None) -> None:
        """Asserts the transaction published nothing (to `topic`, if given)."""
        __tracebackhide__ = True
        _check_nothing(topic, published(conn))

    async def assert_nothing_published_async(self, conn: Any, topic: str | None = None) -> None:
        __tracebackhide__ = True
        _check_nothing(topic, await published_async(conn))


def _check(criteria: Criteria, count: int | None,
           messages: list[PublishedMessage]) -> list[PublishedMessage]:
    __tracebackhide__ = True
    matched = [m for m in messages if criteria.matches(m)]
    if (count is None and matched) or (count is not None and len(matched) == count):
        return matched
    wanted = "a message" if count is None else f"{count} message(s)"
    raise AssertionError(
        f"expected {wanted} with {criteria.describe()}; {len(matched)} matched.\n"
        + report(messages))


def _check_nothing(topic: str | None, messages: list[PublishedMessage]) -> None:
    __tracebackhide__ = True
    found = [m for m in messages if topic is None or m.topic == topic]
    if found:
        where = "" if topic is None else f" to {topic!r}"
        raise AssertionError(f"expected nothing published{where}.\n" + report(found))


def report(messages: list[PublishedMessage]) -> str:
    """What the transaction published, one line per message, for a failure message."""
    if not messages:
        return "This transaction published nothing."
    lines = [f"This transaction published {len(messages)} message(s):"]
    lines += [f"  {describe(m)}" for m in messages]
    return "\n".join(lines)


def describe(m: PublishedMessage) -> str:
    value = "None" if m.value is None else repr(m.value[:PREVIEW])
    if m.value is not None and len(m.value) > PREVIEW:
        value += f"... ({len(m.value)} bytes)"
    text = f"topic={m.topic!r} key={m.key!r} value={value}"
    if m.partition_key is not None:
        text += f" partition_key={m.partition_key!r}"
    return text + (f" headers={m.headers!r}" if m.headers else "")


def _equal(expected: Any, actual: Any) -> bool:
    return expected is ANY or expected == actual


def _utf8(value: Any) -> Any:
    return value.encode() if isinstance(value, str) else value


def _value_matches(expected: Any, value: bytes | None) -> bool:
    if isinstance(expected, re.Pattern):
        if value is None:
            return False
        if isinstance(expected.pattern, str):
            return expected.search(value.decode("utf-8", "replace")) is not None
        return expected.search(value) is not None
    if callable(expected) and expected is not ANY:
        return bool(expected(value))
    return _equal(_utf8(expected), value)


def _json_matches(expected: Any, m: PublishedMessage) -> bool:
    if expected is ANY:
        return True
    try:
        return bool(m.json() == expected)
    except (ValueError, json.JSONDecodeError):
        return False

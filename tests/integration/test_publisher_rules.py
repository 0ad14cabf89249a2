"""The publisher's Python mirror of the relay's SQL rules agrees with the SQL itself.

outbox_relay.outbox.checks measures headers as `headers::jsonb::text` and checks them as
relay_message_problem does (schemas 0007, 0009). Both are asked the same adversarial
questions here, on the real PostgreSQL: where they disagree, the publisher would let
through what the relay parks or blocks on, or refuse what it would send.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import psycopg2
import pytest

from outbox_relay.errors import InvalidMessageError
from outbox_relay.outbox.checks import Limits, Message, jsonb_text, outbox_row

pytestmark = pytest.mark.integration

HEADERS: list[dict[str, str]] = [
    {},
    {"a": "b"},
    {"": ""},
    {"é": "ü", "ключ": "значение"},
    {"emoji \U0001f600": "\U0001f600\U0010ffff", "bmp": "\ud7ff\ue000\uffff"},
    {'quote"': 'back\\slash', "slash": "/"},
    {"controls": "\x01\x08\x0c\x1f\x7f", "breaks": "a\nb\r\tc"},
    {"separators": "\u2028\u2029\u0085"},
    {"looks escaped": "\\u0000 \\n \\\"", "\\u00e9": "x"},
    {"spaces": " a : b , c "},
    {f"k{i}": str(i) * (i % 7) for i in range(200)},
    {"long": "x" * 100_000},
]

SQL_PROBLEM = """
SELECT relay_message_problem(0, %(topic)s, %(message)s, %(key)s, %(partition_key)s,
                             %(headers)s::jsonb, %(max_bytes)s, %(prefix)s)
"""


@pytest.mark.parametrize("headers", HEADERS, ids=range(len(HEADERS)))
def test_the_json_text_length_is_what_jsonb_prints(cur: Any, headers: dict[str, str]) -> None:
    text = jsonb_text(headers)
    cur.execute("SELECT octet_length(%s::jsonb::text), %s::jsonb = %s::jsonb",
                (text, text, json.dumps(headers)))
    length, same_object = cur.fetchone()
    assert len(text.encode()) == length
    assert same_object, "the text must stand for the very same object"


def _encode(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _sql_problem(cur: Any, message: Message, headers: object, limits: Limits) -> str | None:
    cur.execute(SQL_PROBLEM, {
        "topic": message.topic, "message": _encode(message.value), "key": _encode(message.key),
        "partition_key": message.partition_key,
        "headers": None if headers is None else json.dumps(headers),
        "max_bytes": limits.max_bytes, "prefix": limits.header_prefix,
    })
    return cur.fetchone()[0]


def _python_problem(message: Message, limits: Limits) -> tuple[str | None, object]:
    """Python's verdict, and the headers as the relay will see them (the stored row's)."""
    try:
        row = outbox_row(message, limits)
    except InvalidMessageError as exc:
        empty = isinstance(message.headers, Mapping) and not message.headers
        return str(exc), None if empty else message.headers  # as outbox_row would store them
    return None, None if row.headers is None else json.loads(row.headers)


PREFIX = "outbox-relay."
SOURCE = "outbox-relay"  # the relay's default source_name (ce_source on a CloudEvents topic)
# (headers, prefix, the words both verdicts hold, or None where both accept)
HEADER_CASES: list[tuple[object, str, str | None]] = [
    ({"x-outbox-relay.id": "1"}, PREFIX, None),  # the prefix in the middle of a name
    ({"outbox-relay": "1"}, PREFIX, None),  # the prefix less its last character
    ({"OUTBOX-RELAY.id": "1"}, PREFIX, None),  # another case
    ({"outbox-relay.": "1"}, PREFIX, "reserved prefix"),  # the prefix itself
    ({"ok": "1", "outbox-relay.id": "1"}, PREFIX, "reserved prefix"),
    ({"über.x": "1"}, "über.", "reserved prefix"),
    ({"ubër.x": "1"}, "über.", None),
    ({"abc%": "1"}, "a_%", None),  # no LIKE patterns in the prefix
    ({"a_%x": "1"}, "a_%", "reserved prefix"),
    ({"a": {"b": "c"}}, PREFIX, "must be strings"),
    ({"a": ["x"]}, PREFIX, "must be strings"),
    ({"a": None}, PREFIX, "must be strings"),
    ({"a": 1}, PREFIX, "must be strings"),
    ({"a": True}, PREFIX, "must be strings"),
    ({}, PREFIX, None),
    ([["a", "b"]], PREFIX, "headers must be"),
    ("a=b", PREFIX, "headers must be"),
]


@pytest.mark.parametrize(("headers", "prefix", "words"), HEADER_CASES,
                         ids=range(len(HEADER_CASES)))
def test_header_checks_agree_with_relay_message_problem(
    cur: Any, headers: Any, prefix: str, words: str | None,
) -> None:
    limits = Limits(prefix, 1_000_000, SOURCE)
    message = Message("orders", b"v", key=b"k", headers=headers)
    python, relay_sees = _python_problem(message, limits)
    sql = _sql_problem(cur, message, relay_sees, limits)
    assert (python is None, sql is None) == (words is None, words is None), (python, sql)
    if words is not None:
        assert words in python and words in sql, (python, sql)


@pytest.mark.parametrize("headers", [None, *HEADERS[:10]], ids=range(11))
def test_the_size_limit_agrees_with_relay_message_problem_at_the_boundary(
    cur: Any, headers: Mapping[str, str] | None,
) -> None:
    message = Message("orders", "välue \U0001f600", key="ключ", partition_key="p",
                      headers=headers)
    stored = None if not headers else json.dumps(headers)  # no headers are stored as NULL
    cur.execute("SELECT octet_length(%s::bytea) + octet_length(%s::bytea) "
                "+ coalesce(octet_length(%s::jsonb::text), 0)",
                (message.value.encode(), message.key.encode(), stored))  # type: ignore[union-attr]
    size = cur.fetchone()[0]
    for max_bytes, accepted in ((size, True), (size - 1, False)):
        limits = Limits(PREFIX, max_bytes, SOURCE)
        python, relay_sees = _python_problem(message, limits)
        sql = _sql_problem(cur, message, relay_sees, limits)
        assert (python is None, sql is None) == (accepted, accepted), (max_bytes, python, sql)
        assert python == sql, "the same words for the same size"


def test_what_postgresql_cannot_store_is_refused_before_it_is_sent(cur: Any) -> None:
    """A NUL in a header or partition_key: PostgreSQL refuses it too, with a driver error
    the caller would otherwise get mid-transaction."""
    for headers, pk in (({"a": "x\x00y"}, None), ({"a\x00": "x"}, None), (None, "p\x00")):
        python, _ = _python_problem(Message("orders", b"v", partition_key=pk, headers=headers),
                                    Limits(PREFIX, 1_000_000, SOURCE))
        assert python is not None and "NUL" in python
    cur.execute("SAVEPOINT nul")
    with pytest.raises(psycopg2.Error, match="unsupported Unicode escape sequence"):
        cur.execute("SELECT %s::jsonb", (json.dumps({"a": "x\x00y"}),))
    cur.execute("ROLLBACK TO SAVEPOINT nul")

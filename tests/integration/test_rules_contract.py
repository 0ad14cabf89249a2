"""Each rule of outbox_relay/rules/ agrees with its SQL twin, asked on the real PostgreSQL.

The same table of adversarial inputs goes to both runtimes: partition_key NULL, equal to
the key's text or different from it; binary and NULL keys; illegal topic names; records at
and over the size bound; header names at the reserved prefix. Where the two disagree, one
runtime would send, order or refuse a row the other treats differently.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from outbox_relay.outbox.checks import jsonb_text
from outbox_relay.rules.headers import is_reserved
from outbox_relay.rules.partitioners import partitioning_key
from outbox_relay.rules.record_size import payload_size
from outbox_relay.rules.topic_names import topic_name_problem

pytestmark = pytest.mark.integration

PREFIX = "outbox-relay."
KEYS: list[tuple[str | None, bytes | None]] = [
    (None, None), (None, b""), ("", None), ("", b""), ("k", b"k"), ("k", b"other"),
    (None, b"\x00\xff\xfe"), ("\\x41", b"A"), ("ключ-ü\U0001f680", None),
    (None, "ключ-ü\U0001f680".encode()), ("tab\there", b"\\"), (None, b"\xc3\x28"),
]
HEADERS: list[dict[str, str] | None] = [
    None, {}, {"a": "b"}, {"é": "ü", "ключ": "значение"}, {'q"': "back\\slash\n\x01"},
    {"emoji \U0001f600": "\U0010ffff"}, {f"k{i}": "x" * i for i in range(50)},
]
VALUES: list[bytes | None] = [None, b"", b"v", b"\x00" * 3, "välue \U0001f600".encode(),
                              b"x" * 100_000]
HEADER_NAMES = ["outbox-relay.", "outbox-relay.id", "outbox-relay", "x-outbox-relay.id",
                "OUTBOX-RELAY.id", "", "outbox-relay.\U0001f600"]
ILLEGAL_TOPICS = [".", "..", "", "a b", "a/b", "a" * 250, "tab\t", "trailing\n", "ü"]


@pytest.mark.parametrize(("partition_key", "key"), KEYS, ids=range(len(KEYS)))
def test_the_partitioning_key_is_relay_partitioning_key(
    cur: Any, partition_key: str | None, key: bytes | None,
) -> None:
    cur.execute("SELECT relay_partitioning_key(%s, %s)", (partition_key, key))
    sql = cur.fetchone()[0]
    assert (None if sql is None else bytes(sql)) == partitioning_key(partition_key, key)


@pytest.mark.parametrize("headers", HEADERS, ids=range(len(HEADERS)))
@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_payload_size_is_relay_message_size(
    cur: Any, value: bytes | None, headers: dict[str, str] | None,
) -> None:
    for _, key in KEYS:
        stored = None if headers is None else json.dumps(headers)
        cur.execute("SELECT relay_message_size(%s, %s, %s::jsonb)", (value, key, stored))
        sql = cur.fetchone()[0]
        text = None if headers is None else jsonb_text(headers)
        assert sql == payload_size(value, key, text), (key, headers)


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_size_bound_decides_as_relay_message_problem(cur: Any, value: bytes | None) -> None:
    """At the bound the row passes, one byte under it relay_message_problem refuses it."""
    for partition_key, key in KEYS:
        size = payload_size(value, key, None)
        for max_bytes, passes in ((size, True), (size - 1, False)):
            cur.execute(
                "SELECT relay_message_problem(0, 'contract', %s, %s, %s, NULL, %s, %s)",
                (value, key, partition_key, max_bytes, PREFIX))
            problem = cur.fetchone()[0]
            assert (problem is None) == passes, (key, max_bytes, problem)


@pytest.mark.parametrize("name", HEADER_NAMES, ids=range(len(HEADER_NAMES)))
def test_a_reserved_header_name_is_what_relay_message_problem_refuses(
    cur: Any, name: str,
) -> None:
    cur.execute("SELECT relay_message_problem(0, 'contract', 'v', NULL, NULL, %s::jsonb,"
                " 1000000, %s)", (json.dumps({name: "x"}), PREFIX))
    problem = cur.fetchone()[0]
    assert (problem is not None and "reserved prefix" in problem) == is_reserved(name, PREFIX)


@pytest.mark.parametrize("topic", ILLEGAL_TOPICS, ids=range(len(ILLEGAL_TOPICS)))
def test_an_illegal_topic_name_is_the_drivers_to_refuse_not_the_databases(
    cur: Any, topic: str,
) -> None:
    """The database keeps such a row (it has no twin of the rule); the rule names it."""
    assert topic_name_problem(topic) is not None
    cur.execute("SELECT relay_message_problem(0, %s, 'v', 'k', NULL, NULL, 1000000, %s)",
                (topic, PREFIX))
    assert cur.fetchone()[0] is None


@pytest.mark.parametrize("headers", HEADERS, ids=range(len(HEADERS)))
def test_the_claims_pre_filter_passes_every_row_relay_message_problem_refuses(
    cur: Any, headers: dict[str, str] | None,
) -> None:
    """relay_message_may_fail is false only where relay_message_problem finds nothing: a
    row it let by unchecked would be sent although the check refuses it."""
    stored = None if headers is None else json.dumps({**(headers or {}), f"{PREFIX}id": "1"}
                                                     if headers else headers)
    for partition_key, key in KEYS:
        for value in VALUES:
            size = payload_size(value, key, None if stored is None else jsonb_text(
                json.loads(stored)))
            for max_bytes, key_required in ((size, False), (size - 1, False), (size, True)):
                cur.execute(
                    "SELECT relay_message_may_fail(relay_message_size(%(v)s, %(k)s, %(h)s),"
                    " %(max)s, %(h)s, %(k)s, %(req)s, false), relay_message_problem(0,"
                    " 'contract', %(v)s, %(k)s, %(pk)s, %(h)s, %(max)s, %(prefix)s, %(req)s)",
                    {"v": value, "k": key, "pk": partition_key, "h": stored, "max": max_bytes,
                     "req": key_required, "prefix": PREFIX})
                may_fail, problem = cur.fetchone()
                assert may_fail or problem is None, (key, headers, max_bytes, problem)

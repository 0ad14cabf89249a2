"""The CloudEvents rule of a topic (outbox_relay.rules.cloudevent_topics) agrees with its SQL twin
(outbox_relay/schemas/0016), asked on the real PostgreSQL, and the claim's pre-filter lets every
row the check refuses through to it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from outbox_relay.config import TopicRule
from outbox_relay.outbox.checks import jsonb_text
from outbox_relay.rules import cloudevents as ce
from outbox_relay.rules.cloudevent_topics import PLAIN, TopicFlags, allowance, message_problem
from outbox_relay.rules.record_size import payload_size

pytestmark = pytest.mark.integration

PREFIX = "outbox-relay."
HEADERS: list[dict[str, str] | None] = [
    None, {}, {"a": "b"}, {"ce_type": "com.example.x"}, {"ce_type": ""},
    {"ce_type": "t", "content-type": "application/json"}, {"content-type": "text/plain"},
    *({name: "x"} for name in ce.RELAY_ATTRIBUTES),
    {"ce_type": "t", "ce_time": "2026-01-01T00:00:00Z", "ce_id": "1"},
    {"CE_ID": "1", "ce_idx": "2", "ce_typ": "t"}, {"ce_type": "ü \U0001f600"},
]
FLAGS = [PLAIN, TopicFlags(cloudevents=True), TopicFlags(cloudevents=True, type_required=True)]
KEYS: list[tuple[str | None, bytes | None]] = [
    (None, None), (None, b"\x00\xff"), ("k", b"k"), ("other", b"k"), ("pk", None)]


def _problem(cur: Any, headers: str | None, flags: TopicFlags, max_bytes: int = 10**6,
             key: bytes | None = b"k", partition_key: str | None = None) -> str | None:
    cur.execute(
        "SELECT relay_message_problem(0, 'contract', 'v', %(k)s, %(pk)s, %(h)s::jsonb,"
        " %(max)s, %(prefix)s, false, %(ce)s, %(req)s)",
        {"k": key, "pk": partition_key, "h": headers, "max": max_bytes, "prefix": PREFIX,
         "ce": flags.cloudevents, "req": flags.type_required})
    problem: str | None = cur.fetchone()[0]
    return problem


@pytest.mark.parametrize("flags", FLAGS, ids=["plain", "cloudevents", "type-required"])
@pytest.mark.parametrize("headers", HEADERS, ids=range(len(HEADERS)))
def test_the_cloudevents_problem_is_relay_message_problems(
    cur: Any, headers: dict[str, str] | None, flags: TopicFlags,
) -> None:
    stored = None if headers is None else json.dumps(headers)
    assert _problem(cur, stored, flags) == message_problem(headers, flags)


def test_the_shape_checks_come_first(cur: Any) -> None:
    """A row with a reserved header or a non-string value is refused for that, as before."""
    reserved = json.dumps({f"{PREFIX}id": "1"})
    assert "reserved prefix" in (_problem(cur, reserved, FLAGS[2]) or "")
    assert _problem(cur, '{"ce_type": 1}', FLAGS[2]) == "header values must be strings"
    assert "over the limit" in (_problem(cur, None, FLAGS[2], max_bytes=1) or "")


@pytest.mark.parametrize("flags", FLAGS, ids=["plain", "cloudevents", "type-required"])
def test_the_claims_pre_filter_passes_every_row_the_check_refuses(
    cur: Any, flags: TopicFlags,
) -> None:
    for headers in HEADERS:
        stored = None if headers is None else json.dumps(headers)
        for partition_key, key in KEYS:
            size = payload_size(b"v", key, None if headers is None else jsonb_text(headers))
            for max_bytes in (size, size - 1):
                cur.execute(
                    "SELECT relay_message_may_fail(relay_message_size('v', %(k)s, %(h)s),"
                    " %(max)s, %(h)s, %(k)s, false, false, %(req)s)",
                    {"k": key, "h": stored, "max": max_bytes, "req": flags.type_required})
                may_fail = cur.fetchone()[0]
                problem = _problem(cur, stored, flags, max_bytes, key, partition_key)
                assert may_fail or problem is None, (headers, key, max_bytes, problem)


def test_the_allowance_leaves_room_for_the_added_attributes() -> None:
    plain = 10_000
    rule = TopicRule(match=".*", cloudevents=True, event_type="com.example.default")
    untyped = TopicRule(match=".*", cloudevents=True)
    added = ce.added_header_bytes("src", "com.example.default")
    assert allowance(plain, "src", rule) == plain - added
    assert allowance(plain, "src", untyped) == plain - ce.added_header_bytes("src")
    assert allowance(plain, "src", TopicRule(match=".*")) == plain
    assert allowance(10, "src", rule) == 0

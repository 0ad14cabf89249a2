"""The async publisher's pure parts: its signatures are the sync publisher's, it shares the
sync publisher's statement and pages, and it refuses what it cannot publish through."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

import outbox_relay
from outbox_relay.errors import PublishError
from outbox_relay.outbox import checks, publisher, publisher_async, statement
from outbox_relay.outbox.checks import Message, limits, outbox_row


@pytest.mark.parametrize(("sync", "async_"), [
    (outbox_relay.publish, outbox_relay.publish_async),
    (outbox_relay.publish_many, outbox_relay.publish_many_async),
])
def test_the_async_signatures_are_the_sync_ones(sync: Callable[..., Any],
                                                async_: Callable[..., Any]) -> None:
    expected = inspect.signature(sync)
    got = inspect.signature(async_)
    assert list(got.parameters) == list(expected.parameters)
    assert got.parameters == expected.parameters  # kinds, defaults and annotations too
    assert got.return_annotation == expected.return_annotation
    assert inspect.iscoroutinefunction(async_)
    assert async_.__module__ == "outbox_relay.outbox.publisher_async"


def test_both_publishers_page_and_insert_with_the_one_shared_definition() -> None:
    for module in (publisher, publisher_async):
        assert vars(module)["pages"] is statement.pages
        assert vars(module)["checked_rows"] is checks.checked_rows
    assert publisher.INSERT_MESSAGES is statement.INSERT_MESSAGES
    # PAGE_ROWS + 1 messages: two pages, so two statements.
    rows = [outbox_row(Message("t", str(i)), limits("p.", 100))
            for i in range(statement.PAGE_ROWS + 1)]
    assert [len(p) for p in statement.pages(rows)] == [statement.PAGE_ROWS, 1]


def test_the_asyncpg_statement_is_the_psycopg_one_with_numbered_markers() -> None:
    named, numbered = statement.INSERT_MESSAGES, statement.INSERT_MESSAGES_NUMBERED
    markers = re.findall(r"%\((\w+)\)s", named)
    assert markers == list(statement.COLUMNS)
    assert re.findall(r"\$(\d+)", numbered) == [str(i) for i in range(1, len(markers) + 1)]
    for i, name in enumerate(markers, 1):
        numbered = numbered.replace(f"${i}", f"%({name})s", 1)
    assert numbered == named
    rows = [outbox_row(Message("t", b"v", key=b"\xff", partition_key="p",
                               headers={"h": "1"}), limits("p.", 100))]
    by_name = statement.params_for("pyformat", rows)
    assert by_name == statement.params(rows)
    assert statement.params_for("numeric_dollar", rows) == tuple(
        by_name[c] for c in statement.COLUMNS)
    with pytest.raises(PublishError, match="paramstyle 'qmark'"):
        statement.insert_statement("qmark")


@pytest.mark.parametrize("conn", [object(), "postgresql://db/app"])
def test_an_unknown_connection_type_is_refused_before_anything_else(conn: object) -> None:
    kind = re.escape(f"{type(conn).__module__}.{type(conn).__qualname__}")
    with pytest.raises(PublishError, match=f"cannot publish through a {kind}"):
        asyncio.run(outbox_relay.publish_async(conn, "t", b"v"))
    with pytest.raises(PublishError, match=f"cannot publish through a {kind}"):
        asyncio.run(outbox_relay.publish_many_async(conn, [Message("bad topic", b"v")]))


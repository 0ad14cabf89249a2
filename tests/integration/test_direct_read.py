"""The direct lane's read of a claimed batch (outbox_relay.direct.read, PostgreSQL's binary
COPY) gives back what the application wrote: every key shape, a payload of every byte,
empty and NULL payloads and keys, an empty partition_key, user headers with quotes,
backslashes and non-ASCII text, a topic whose partition count is unknown, a payload of
300 KB, in id order; also in a database whose server encoding is LATIN1. The oracle is
the rows as written, and created_at as psycopg2's own text protocol reads it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from outbox_relay.control.db import Database
from outbox_relay.direct.read import read_batch
from outbox_relay.stack import StackInfo
from tests.integration.claiming import claim_all
from tests.integration.conftest import ConfigFactory, migrated_database
from tests.integration.helpers import Msg, every_key_shape, insert, query, unique

pytestmark = pytest.mark.integration


def _odd_rows(topics: list[str], text: str) -> list[Msg]:
    """Payloads and headers the text protocol escapes, and `text` (non-ASCII, of the
    database's encoding) in partition keys and headers."""
    a, b = topics
    return [
        Msg(a, bytes(range(256)), bytes(range(255, -1, -1)), f"pk-{text}-\\-'\"",
            {"q": 'a"b\\c', text: f"{text}\n\t"}),
        Msg(a, b"", b"", "", {}),
        Msg(b, None, None, None, None),
        Msg(b, b"\x00", os.urandom(300_000), text, {"x": "[\"nested\", 1]", "": "empty name"}),
        Msg(b, b"\\x00", b"\\\\", "\\x00", None),
    ]


def _read_back(config_url: str, make_config: ConfigFactory, topics: list[str],
               written: list[Msg]) -> None:
    ids = insert(config_url, [written[i:i + 7] for i in range(0, len(written), 7)])
    config = make_config(topics, postgres={"url": config_url, "sslmode": "disable"})
    known = {topics[0]: 4}  # the second topic's count stays unknown
    batch_id = claim_all(config, topics, known)
    db = Database(config.postgres)
    try:
        rows = read_batch(db, batch_id, topics)
    finally:
        db.close()
    created = dict(query(config_url, "SELECT id, created_at::text FROM kafka_messages"))
    assert [r.id for r in rows] == sorted(ids)
    by_id = dict(zip(ids, written, strict=True))
    for row in rows:
        m = by_id[row.id]
        assert (row.topic, row.message, row.key, row.partition_key) == (
            m.topic, m.value, m.key, m.partition_key), row.id
        assert (json.loads(row.headers) if row.headers is not None else None) == m.headers
        assert row.created_at == created[row.id]
        assert row.partition_count == known.get(m.topic)
        assert type(row.message) in (bytes, type(None)) and type(row.key) in (bytes, type(None))


def test_the_read_gives_back_every_row_as_written(
    migrated_url: str, make_config: ConfigFactory,
) -> None:
    topics = [unique("read-a"), unique("read-b")]
    written = every_key_shape(topics, 12) + _odd_rows(topics, "ü✓")
    _read_back(migrated_url, make_config, topics, written)


@pytest.fixture
def latin1_url(stack: StackInfo) -> Iterator[str]:
    """A migrated database whose server encoding is LATIN1: psycopg2's connections to it
    speak LATIN1, and so do the text fields of its binary COPY."""
    with migrated_database(stack, "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' "
                                  "TEMPLATE template0") as url:
        yield url


def test_the_read_decodes_text_in_the_databases_own_encoding(
    latin1_url: str, make_config: ConfigFactory,
) -> None:
    topics = [unique("latin-a"), unique("latin-b")]
    written = every_key_shape(topics, 6) + _odd_rows(topics, "éü")
    _read_back(latin1_url, make_config, topics, written)

"""The `outbox` fixture (outbox_relay.testing, the pytest11 entry point outbox_relay) in an
application's own test run: pytester writes the application's tests, runs them in a
pytest process of their own (the plugin comes from the installed entry point, as in an
application's venv), against a fresh migrated database with an `orders` table.
The async drivers: tests/integration/test_outbox_plugin_async.py.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import psycopg2
import pytest

from outbox_relay.errors import MigrationError
from outbox_relay.testing import Outbox
from tests.integration.doc_snippets import not_run

pytestmark = pytest.mark.integration
pytest_plugins = ["pytester"]

ORDERS = "CREATE TABLE orders (id int PRIMARY KEY, total numeric)"


@pytest.fixture
def app_database(migrated_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The application's test database: the relay's schema, its own table, its URL in
    DATABASE_URL for the pytest process that pytester starts."""
    return _app_database(migrated_url, monkeypatch)


def _app_database(url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    conn = psycopg2.connect(url)
    with conn, conn.cursor() as cur:
        cur.execute(ORDERS)
    conn.close()
    monkeypatch.setenv("DATABASE_URL", url)
    return url


def test_the_documented_test_file_passes(database_url: str, pytester: pytest.Pytester,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # The schema as the page says to apply it: `outbox-relay migrate` on RELAY_POSTGRES_URL.
    cli = Path(sys.executable).with_name("outbox-relay")
    migrated = subprocess.run([str(cli), "migrate"], capture_output=True, text=True,
                              env={**os.environ, "RELAY_POSTGRES_URL": database_url})
    assert migrated.returncode == 0, migrated.stderr
    _app_database(database_url, monkeypatch)
    code = not_run("publishing.md", "a pytest file").code
    pytester.makepyfile(test_checkout=code)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


SYNC_APP = '''
import os
import re

import psycopg
import psycopg2
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

import outbox_relay

URL = os.environ["DATABASE_URL"]


@pytest.fixture(scope="module")
def shared():
    conn = psycopg2.connect(URL)  # one connection for the module's tests
    yield conn
    conn.close()


@pytest.fixture
def conn(shared):
    yield shared
    shared.rollback()


def committed(topic, key):
    with psycopg2.connect(URL) as other, other.cursor() as cur:
        cur.execute("INSERT INTO orders VALUES (%s, 1)", (int(key.split("-")[1]),))
        outbox_relay.publish(other, topic, b"committed", key=key)
    other.close()


def test_a_passing_assertion(conn, outbox):
    outbox_relay.publish(conn, "orders.created", b'{"id": 1}', key="order-1",
                  headers={"tenant": "eu"}, event_type="shop.order.created")
    outbox_relay.publish(conn, "invoices", "invoice 1", partition_key="customer-7")
    [m] = outbox.assert_published(conn, "orders.created", key=b"order-1", value=b'{"id": 1}',
                                  headers={"tenant": "eu"}, event_type="shop.order.created")
    assert (m.topic, m.key, m.value) == ("orders.created", b"order-1", b'{"id": 1}')
    assert m.json() == {"id": 1} and m.headers["tenant"] == "eu"
    outbox.assert_published(conn, "invoices", key=None, value="invoice 1", count=1,
                            partition_key="customer-7")
    outbox.assert_published(conn, value=re.compile(r"^invoice \\d$"))
    outbox.assert_published(conn, value=re.compile(rb"id"), count=1)
    outbox.assert_published(conn, value=lambda v: v.endswith(b"}"), json={"id": 1})
    assert [x.topic for x in outbox.published(conn)] == ["orders.created", "invoices"]
    outbox.assert_nothing_published(conn, "refunds")


def test_b_a_failing_assertion_says_what_was_published(conn, outbox):
    outbox_relay.publish(conn, "orders.created", b'{"id": 1}', key="order-1")
    outbox_relay.publish(conn, "orders.created", b"x" * 500, key="order-2")
    outbox.assert_published(conn, "orders.created", key="order-3")


def test_c_nothing_leaks_from_the_rolled_back_tests(conn, outbox):
    outbox.assert_nothing_published(conn)
    assert outbox.published(conn) == []


def test_d_rows_committed_before_do_not_count(conn, outbox):
    committed("orders.created", "order-5")
    outbox_relay.publish(conn, "orders.created", b"before", key="order-6")
    conn.commit()  # this transaction ends: its row is committed, the next one starts empty
    committed("orders.created", "order-7")
    outbox.assert_nothing_published(conn, "orders.created")
    outbox_relay.publish(conn, "orders.created", b"mine", key="order-8")
    [m] = outbox.assert_published(conn, "orders.created", count=1)
    assert m.value == b"mine"


def test_e_savepoints_count_unless_rolled_back():
    with psycopg.connect(URL) as conn:
        conn.execute("INSERT INTO orders VALUES (11, 1)")  # begins the test's transaction
        with conn.transaction():  # a savepoint inside it, released
            outbox_relay.publish(conn, "orders.created", b"kept", key="k")
        with conn.transaction():
            outbox_relay.publish(conn, "orders.created", b"dropped", key="d")
            raise psycopg.Rollback()  # this savepoint only
        with conn.transaction():  # still open while the outbox is read
            outbox_relay.publish(conn, "orders.created", b"open", key="o")
            from outbox_relay.testing import Outbox
            assert [m.value for m in Outbox().published(conn)] == [b"kept", b"open"]
        conn.rollback()


def test_f_sqlalchemy_session_and_connection(outbox):
    engine = create_engine(URL.replace("postgresql://", "postgresql+psycopg://"))
    with Session(engine) as session, session.begin():
        session.execute(text("INSERT INTO orders VALUES (9, 1)"))
        outbox_relay.publish(session, "orders.created", b'{"id": 9}', key="order-9")
        outbox.assert_published(session, "orders.created", json={"id": 9}, count=1)
        session.rollback()
    with engine.connect() as connection:
        with connection.begin() as tx:
            outbox_relay.publish(connection, "invoices", b"9")
            outbox.assert_published(connection, "invoices", value="9", key=None)
            tx.rollback()
    engine.dispose()


def test_g_nothing_published_fails_with_the_list(conn, outbox):
    outbox_relay.publish(conn, "orders.created", None, key="order-10", headers={"h": "v"})
    outbox.assert_nothing_published(conn)
'''


def test_sync_drivers_pass_and_fail_readably(app_database: str,
                                             pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_app=SYNC_APP)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=5, failed=2)
    result.stdout.fnmatch_lines([
        "*test_b_a_failing_assertion_says_what_was_published*",
        "E*AssertionError: expected a message with topic='orders.created', key='order-3';"
        " 0 matched.",
        "E*This transaction published 2 message(s):",
        "E*topic='orders.created' key=b'order-1' value=b'{\"id\": 1}'",
        "E*topic='orders.created' key=b'order-2' value=b'" + "x" * 80 + "'... (500 bytes)",
    ])
    result.stdout.fnmatch_lines([
        "*test_g_nothing_published_fails_with_the_list*",
        "E*AssertionError: expected nothing published.",
        "E*This transaction published 1 message(s):",
        "E*topic='orders.created' key=b'order-10' value=None headers={'h': 'v'}",
    ])


def test_a_database_without_the_relays_schema_says_to_migrate(database_url: str) -> None:
    """The fixture on a test database nobody migrated: the error names the command, for a
    sync and an async driver (the driver's own error stays as the cause)."""
    outbox = Outbox()
    conn = psycopg2.connect(database_url)
    try:
        with pytest.raises(MigrationError, match="outbox-relay migrate") as caught:
            outbox.published(conn)
        assert isinstance(caught.value.__cause__, psycopg2.errors.UndefinedTable)
    finally:
        conn.close()

    async def on_asyncpg() -> None:
        aconn = await asyncpg.connect(database_url)
        try:
            with pytest.raises(MigrationError, match="kafka_messages"):
                await outbox.published_async(aconn)
        finally:
            await aconn.close()

    asyncio.run(on_asyncpg())

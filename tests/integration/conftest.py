"""Integration fixtures: a fresh database per test on the shared stack, and a relay runner."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from pyspark.sql import SparkSession

from outbox_relay.config import Config
from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import migrate
from outbox_relay.ledger.delta import Ledger
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import RunResult, run
from outbox_relay.stream.stop import StopSignal
from outbox_relay.wiring import Relay, build_relay
from tests.integration.many import Databases
from tests.integration.parties import Party
from tests.integration.prometheus import running_pushgateway
from tests.integration.wheel import build_wheel

pytestmark = pytest.mark.integration


def _admin_url(stack: StackInfo, database: str) -> str:
    base, _, _ = stack.postgres_url.rpartition("/")
    return f"{base}/{database}"


@pytest.fixture
def database_url(stack: StackInfo) -> Iterator[str]:
    """A database of its own for each test, migrated: its own kafka_messages and friends."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(stack.postgres_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')  # a generated identifier, not user input
    url = _admin_url(stack, name)
    yield url
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


@contextmanager
def migrated_database(stack: StackInfo, create_options: str = "") -> Iterator[str]:
    """Another migrated database of the stack's server, dropped afterwards; its url.
    `create_options` (a constant of the test's, e.g. an encoding) go to CREATE DATABASE."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(stack.postgres_url)
    admin.autocommit = True
    with admin.cursor() as cur:  # a generated identifier, not user input
        cur.execute(f'CREATE DATABASE "{name}" {create_options}')
    url = _admin_url(stack, name)
    db = Database(build_config({"postgres": {"url": url}}, env={}).postgres)
    try:
        migrate(db)
    finally:
        db.close()
    try:
        yield url
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def databases(stack: StackInfo) -> Iterator[Databases]:
    """`make(n)`: n new databases of the stack's server, (name, url) each, unmigrated."""
    admin = psycopg2.connect(stack.postgres_url)
    admin.autocommit = True
    made: list[str] = []
    base = stack.postgres_url.rpartition("/")[0]

    def make(n: int) -> list[tuple[str, str]]:
        out = []
        for i in range(n):
            name = f"m_{uuid.uuid4().hex[:10]}"
            with admin.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')  # a generated identifier
            made.append(name)
            out.append((f"db-{i}", f"{base}/{name}"))
        return out

    yield make
    with admin.cursor() as cur:
        for name in made:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


@pytest.fixture
def migrated_url(database_url: str) -> str:
    config = build_config({"postgres": {"url": database_url}}, env={})
    db = Database(config.postgres)
    try:
        migrate(db)
    finally:
        db.close()
    return database_url


@pytest.fixture
def cur(migrated_url: str) -> Iterator[Any]:
    """A cursor on a fresh migrated database, in one transaction committed at the end."""
    conn = psycopg2.connect(migrated_url)
    try:
        with conn, conn.cursor() as cursor:
            yield cursor
    finally:
        conn.close()


@pytest.fixture(scope="session")
def project_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of the checked-in sources, built once for every test that installs it."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


ConfigFactory = Callable[..., Config]
LedgerFactory = Callable[[str, Path], Ledger]


@pytest.fixture
def make_config(stack: StackInfo, migrated_url: str, tmp_path: Path) -> ConfigFactory:
    """Short timeouts and private paths; keyword sections override the defaults."""

    def factory(topics: list[str] | None = None, name: str = "relay", **sections: Any) -> Config:
        data: dict[str, Any] = {
            "postgres": {"url": migrated_url, "sslmode": "disable"},
            "kafka": {"bootstrap_servers": stack.kafka_bootstrap, "delivery_timeout_ms": 20000,
                      "request_timeout_ms": 10000, "admin_timeout_s": 5},
            "ledger": {"path": str(tmp_path / "ledger"), "flush_interval_s": 2},
            "relay": {
                "source_name": f"test-{name}",
                "checkpoint_path": str(tmp_path / f"checkpoint-{name}"),
                "poll_interval_s": 0.1,
                "lock_timeout_s": 20,
                "heartbeat_interval_s": 2,
                "backoff_base_s": 0.5,
                "backoff_max_s": 2,
                "available_now_deadline_s": 5,
                "include_topics": [t.replace(".", "\\.") for t in topics] if topics else [".*"],
            },
        }
        for section, values in sections.items():
            data.setdefault(section, {}).update(values)
        return build_config(data, env={})

    return factory


RelayRunner = Callable[..., RunResult]


@pytest.fixture
def make_ledger(spark: SparkSession, make_config: ConfigFactory) -> Iterator[LedgerFactory]:
    """Ledgers of the test's database by writer ("delta-rs" or "spark") and path, each on
    a connection of its own."""
    dbs: list[Database] = []

    def factory(writer: str, path: Path) -> Ledger:
        config = make_config(ledger={"path": str(path), "writer": writer})
        db = Database(config.postgres, f"test-ledger-{writer}")
        dbs.append(db)
        return Ledger(spark, config, db)

    yield factory
    for db in dbs:
        db.close()


@pytest.fixture
def run_relay(spark: SparkSession) -> Iterator[RelayRunner]:
    """Runs a relay in this process on the shared SparkSession, available-now by default."""
    relays: list[Relay] = []

    def runner(config: Config, available_now: bool = True,
               stop: StopSignal | None = None) -> RunResult:
        relay = build_relay(config, spark)
        relays.append(relay)
        return run(relay, available_now, stop)

    yield runner
    for relay in relays:
        relay.close()


def run_in_thread(fn: Callable[[], RunResult]) -> tuple[threading.Thread, list[RunResult]]:
    results: list[RunResult] = []
    thread = threading.Thread(target=lambda: results.append(fn()), daemon=True)
    thread.start()
    return thread, results


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[str]:
    """A real Pushgateway on a free port of 127.0.0.1: its address."""
    with running_pushgateway(tmp_path) as address:
        yield address


@pytest.fixture
def parties(config: Config) -> Iterator[tuple[Party, Party]]:
    """Two relays' control planes (tests/integration/parties.py) under the requesting
    module's `config` fixture, closed after the test."""
    a, b = Party(config, "relay-a"), Party(config, "relay-b")
    yield a, b
    a.close()
    b.close()

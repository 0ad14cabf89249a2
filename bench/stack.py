"""Where the benchmark measures: the local stack that `make demo` starts, its database
with the history it holds (a quick run uses a scratch database of that stack, dropped at
its end), the topics each part creates and deletes, and a settled machine before each
contender."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extensions
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

import outbox_relay.stack
from bench.probes.quiet import settle
from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import migrate

REPO = Path(__file__).resolve().parents[1]


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sys_load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def connect(url: str, autocommit: bool = True) -> psycopg2.extensions.connection:
    conn = psycopg2.connect(url)
    conn.autocommit = autocommit
    return conn


def scalar(url: str, statement: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the one row a statement returns, on a connection of its own."""
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchone()[0]
    finally:
        conn.close()


def migrated(url: str) -> str:
    """`url`, with the relay's tables applied (idempotent, as `outbox-relay migrate`)."""
    config = build_config({"postgres": {"url": url, "sslmode": "disable"}}, env={})
    db = Database(config.postgres, "outbox-relay-bench")
    try:
        migrate(db)
    finally:
        db.close()
    return url


@contextlib.contextmanager
def scratch_database(label: str, keep: bool = False) -> Iterator[str]:
    """A new, migrated database on the local stack (RELAY_STACK_DIR chooses the stack),
    dropped at the end unless `keep`."""
    base = outbox_relay.stack.up().postgres_url
    name = f"bench_{label}_{uuid.uuid4().hex[:8]}"
    # A connection each time, none held meanwhile: MANYIDLE's hundred databases and their
    # relay's four connections each fill the server's max_connections otherwise.
    _admin(base, f'CREATE DATABASE "{name}"')  # a generated identifier
    try:
        yield migrated(f"{base.rpartition('/')[0]}/{name}")
    finally:
        if not keep:
            _admin(base, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _admin(url: str, statement: str) -> None:
    admin = connect(url)
    try:
        with admin.cursor() as cur:
            cur.execute(statement)
    finally:
        admin.close()


def free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Stack:
    """The addresses, and the environment every relay of the run is launched with: the
    shipped profile's, with only the addresses set (a quick run also moves the ledger,
    the checkpoint and the metrics port out of the way of the demo's)."""

    url: str
    bootstrap: str
    env: dict[str, str]

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def partitions(self) -> int:
        """The partitions of every topic the broker holds, its internal ones aside."""
        topics = self.admin().list_topics(timeout=30).topics
        return sum(len(t.partitions) for name, t in topics.items() if not name.startswith("__"))

    def create_topics(self, topics: Sequence[str], partitions: int) -> None:
        """Created, and every partition answering for its offsets (a new partition's
        leader takes a moment after the metadata names it), before any contender starts."""
        admin = self.admin()  # held until the futures resolve: its end cancels them
        for i in range(0, len(topics), 200):
            new = [NewTopic(t, partitions, 1) for t in topics[i:i + 200]]
            for future in admin.create_topics(new, operation_timeout=60).values():
                future.result()
        request = {TopicPartition(t, p): OffsetSpec.latest() for t in topics
                   for p in range(partitions)}
        deadline = time.monotonic() + 60
        while True:
            try:
                admin.list_topics(timeout=10)  # the client's own metadata, refreshed
                for future in admin.list_offsets(request, request_timeout=30).values():
                    future.result()
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def delete_topics(self, topics: Sequence[str]) -> None:
        """A part's topics, once read back: a run writes gigabytes the stack need not keep."""
        admin = self.admin()
        for i in range(0, len(topics), 200):
            for future in admin.delete_topics(list(topics[i:i + 200]),
                                              operation_timeout=60).values():
                with contextlib.suppress(KafkaException):
                    future.result()

    def forget(self, topics: Sequence[str]) -> int:
        """After a contender: its topics deleted from Kafka, and from the outbox whatever
        of theirs it left (returned: a drain stopped at its cap leaves rows that the next
        contender would otherwise relay), and their `kafka_topic_info` rows, which would
        otherwise pile up in the demo's database run after run (W3 adds a thousand, and
        the peer's idle pass updates every one)."""
        self.delete_topics(topics)
        conn = connect(self.url)
        try:
            with conn.cursor() as cur:
                cur.execute("DELETE FROM kafka_messages WHERE topic = ANY(%s)", (list(topics),))
                left = cur.rowcount
                cur.execute("DELETE FROM kafka_topic_info WHERE topic = ANY(%s)",
                            (list(topics),))
        finally:
            conn.close()
        return int(left)

    def settled(self, topics: Sequence[str]) -> dict[str, Any]:
        """Waits for a settled machine (bench.probes.quiet.settle) and reports it, with the
        rows waiting in the outbox besides those of `topics`: a contender relays every
        topic it finds, so it must find only its own."""
        def vacuuming() -> bool:
            return bool(scalar(self.url, "SELECT count(*) FROM pg_stat_progress_vacuum"))

        waited = settle(vacuuming)
        return {**waited, "load": sys_load(), "other_rows_waiting": scalar(
            self.url, "SELECT count(*) FROM kafka_messages WHERE topic <> ALL(%s)",
            (list(topics),))}


@contextlib.contextmanager
def local_stack(quick: bool, work: Path) -> Iterator[Stack]:
    """`make demo`'s stack and database; with `quick`, a scratch database of it."""
    info = outbox_relay.stack.up()  # the stack of `make demo`, its database and its history
    # spark-submit finds pyspark through the `python` on its PATH: the venv's.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "RELAY_KAFKA_BOOTSTRAP_SERVERS": info.kafka_bootstrap}
    if not quick:
        env["RELAY_POSTGRES_URL"] = migrated(info.postgres_url)
        yield Stack(info.postgres_url, info.kafka_bootstrap, env)
        return
    with scratch_database("quick") as url:
        env.update(RELAY_POSTGRES_URL=url, RELAY_LEDGER__PATH=str(work / "ledger"),
                   RELAY_RELAY__CHECKPOINT_PATH=str(work / "checkpoint"),
                   RELAY_METRICS__PORT=str(free_port()))
        yield Stack(url, info.kafka_bootstrap, env)

"""The Delta ledger never loses a staged record: concurrent copiers, shared paths, dead backends.

Records are staged the way outbox_relay.control.finish stages them (rows in relay_ledger_staging);
what Delta holds is read back from the Delta table on disk.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

from outbox_relay.config import Config
from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database, Params
from outbox_relay.errors import DatabaseUnavailableError, RelayError
from outbox_relay.ledger.delta import Ledger
from outbox_relay.stack import StackInfo
from tests.integration.conftest import ConfigFactory, migrated_database
from tests.integration.helpers import query, wait_for

pytestmark = pytest.mark.integration

STAGE = """
INSERT INTO relay_ledger_staging (session_id, topic, outcome, ids, source)
VALUES (%s, %s, 'published', %s, 'test')
"""
KILL = """
SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
WHERE application_name = %s AND datname = current_database()
"""

Ids = Callable[[int], list[int]]  # hands out the next n ids of a test


def stage(url: str, topic: str, ids: list[int]) -> None:
    query(url, STAGE, (str(uuid.uuid4()), topic, ids))


def staged_count(url: str) -> int:
    return int(query(url, "SELECT count(*) FROM relay_ledger_staging")[0][0])


def in_delta(spark: SparkSession, path: str) -> Counter[tuple[str, int]]:
    rows = spark.read.format("delta").load(path).select("topic", "message_id").collect()
    return Counter((r.topic, r.message_id) for r in rows)


def counter() -> Ids:
    """Ids that never repeat within a test: each call hands out the next `n`."""
    state = {"next": 1}

    def take(n: int) -> list[int]:
        first = state["next"]
        state["next"] += n
        return list(range(first, first + n))

    return take


def ledger(spark: SparkSession, config: Config, name: str) -> Ledger:
    return Ledger(spark, config, Database(config.postgres, name))


@pytest.fixture
def second_url(stack: StackInfo) -> Iterator[str]:
    """A second outbox: another migrated database on the same cluster."""
    with migrated_database(stack) as url:
        yield url


def test_two_outboxes_sharing_a_ledger_path_both_land_every_record(
    spark: SparkSession, make_config: ConfigFactory, migrated_url: str, second_url: str,
) -> None:
    config_a = make_config()
    config_b = build_config(
        {"postgres": {"url": second_url, "sslmode": "disable"},
         "ledger": {"path": config_a.ledger.path}},
        env={},
    )
    a, b = ledger(spark, config_a, "copier-a"), ledger(spark, config_b, "copier-b")
    # Outbox A copies twice (its copy sequence reaches 2), then B copies its first batch.
    stage(migrated_url, "orders", [1, 2, 3])
    a.flush()
    stage(migrated_url, "orders", [4, 5])
    a.flush()
    stage(second_url, "orders", [1, 2, 3, 4])
    b.flush()

    print("delta rows:", sum(in_delta(spark, config_a.ledger.path).values()),
          "staged left A/B:", staged_count(migrated_url), staged_count(second_url))
    assert sum(in_delta(spark, config_a.ledger.path).values()) == 9
    assert staged_count(migrated_url) == staged_count(second_url) == 0
    # Same topic, same id in both outboxes: each outbox's lookup answers with its own record.
    assert [e.where for e in a.lookup("orders", 1)] == ["delta"]
    assert [e.where for e in b.lookup("orders", 4)] == ["delta"]
    assert a.lookup("orders", 5) and b.lookup("orders", 5) == []


def test_two_concurrent_copiers_copy_every_record_exactly_once(
    spark: SparkSession, make_config: ConfigFactory, migrated_url: str,
) -> None:
    config = make_config()
    take, staged = counter(), []
    done = threading.Event()
    errors: list[BaseException] = []
    rounds = Counter[str]()

    def copier(name: str) -> None:
        copy = ledger(spark, config, name)
        try:
            while not done.is_set():
                copy.flush()
                rounds[name] += 1
                done.wait(0.05)  # a copier without the lock would spin on the try-lock
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=copier, args=(n,)) for n in ("copier-a", "copier-b")]
    for t in threads:
        t.start()
    for _ in range(12):
        ids = take(5)
        stage(migrated_url, "orders", ids)
        staged += ids
        # Stage while copies run: the next records only after another flush ended.
        seen = sum(rounds.values())
        assert wait_for(lambda s=seen: sum(rounds.values()) > s or bool(errors), 300, 0.05)
    done.set()
    for t in threads:
        t.join(timeout=300)
    ledger(spark, config, "copier-final").flush()

    copied = in_delta(spark, config.ledger.path)
    print("errors:", errors, "missing:", sorted(set(staged) - {i for _, i in copied}),
          "doubled:", sorted(i for (_, i), n in copied.items() if n > 1))
    assert not errors
    assert copied == Counter(("orders", i) for i in staged)
    assert staged_count(migrated_url) == 0


class ReconnectingDatabase(Database):
    """A control connection that retries a statement once on a new backend after losing
    its own: the copier must not take a reconnect for the session that holds its lock."""

    def all(self, statement: str, params: Params = None) -> list[dict[str, Any]]:
        try:
            return super().all(statement, params)
        except DatabaseUnavailableError:
            return super().all(statement, params)

    def execute(self, statement: str, params: Params = None) -> int:
        try:
            return super().execute(statement, params)
        except DatabaseUnavailableError:
            return super().execute(statement, params)


class PausingLedger(Ledger):
    """A copier that runs `at` between tagging a copy batch and writing it."""

    def __init__(self, spark: SparkSession, config: Config, name: str,
                 at: Callable[[int], None], db: type[Database] = Database) -> None:
        super().__init__(spark, config, db(config.postgres, name))
        self._at = at

    def _before_write(self, copy_batch: int) -> None:
        self._at(copy_batch)


@pytest.mark.parametrize("connection", [Database, ReconnectingDatabase])
def test_a_copier_whose_backend_died_between_tagging_and_writing_loses_nothing(
    spark: SparkSession, make_config: ConfigFactory, migrated_url: str,
    connection: type[Database],
) -> None:
    """A's backend is killed (its advisory lock goes with it) between a batch's tagging
    and its write; B takes the lock, copies that batch, tags its own and pauses; A
    resumes, then B. Every record ends in Delta exactly once, and staging empties."""
    config = make_config()
    kill = lambda name: query(migrated_url, KILL, (name,))  # noqa: E731
    take, staged = counter(), []

    def stage_more(n: int) -> None:
        ids = take(n)
        stage(migrated_url, "orders", ids)
        staged.extend(ids)

    # A restart hits copier C between tagging and writing: its batch stays tagged.
    def crash(_: int) -> None:
        kill("copier-c")
        raise RuntimeError("copier C died between tagging and writing")

    stage_more(3)
    with pytest.raises((RuntimeError, RelayError)):  # the unlock finds the backend gone
        PausingLedger(spark, config, "copier-c", crash).flush()

    events = {k: threading.Event() for k in ("a_paused", "a_go", "b_paused", "b_go")}
    seen: dict[str, list[int]] = {"copier-a": [], "copier-b": []}
    outcome: dict[str, object] = {}

    def pause_a(batch: int) -> None:
        seen["copier-a"].append(batch)
        if len(seen["copier-a"]) == 1:
            kill("copier-a")  # A's lock goes with its backend
            events["a_paused"].set()
            events["a_go"].wait(300)

    def pause_b(batch: int) -> None:
        seen["copier-b"].append(batch)
        if len(seen["copier-b"]) == 2:  # B's own batch, after the leftover one
            events["b_paused"].set()
            events["b_go"].wait(300)

    def run(name: str, at: Callable[[int], None]) -> threading.Thread:
        def body() -> None:
            try:
                outcome[name] = PausingLedger(spark, config, name, at, connection).flush()
            except RelayError as exc:
                outcome[name] = exc
        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        return thread

    stage_more(4)
    thread_a = run("copier-a", pause_a)
    assert events["a_paused"].wait(300)
    thread_b = run("copier-b", pause_b)
    assert events["b_paused"].wait(300), f"B did not reach its own batch: {outcome}"
    stage_more(2)
    events["a_go"].set()
    thread_a.join(300)
    events["b_go"].set()
    thread_b.join(300)
    ledger(spark, config, "copier-final").flush()

    copied = in_delta(spark, config.ledger.path)
    print("outcome:", outcome, "missing:", sorted(set(staged) - {i for _, i in copied}),
          "doubled:", sorted(i for (_, i), n in copied.items() if n > 1))
    assert copied == Counter(("orders", i) for i in staged)
    assert staged_count(migrated_url) == 0


def test_a_batch_delta_skips_is_retagged_and_written_not_deleted(
    spark: SparkSession, make_config: ConfigFactory, migrated_url: str,
) -> None:
    """The copy sequence rewinds (the database was restored to an earlier point, same
    identity): Delta skips the reused batch numbers, so they must be copied anew."""
    config = make_config()
    copier, take, staged = ledger(spark, config, "copier-a"), counter(), []
    for n in (3, 2, 4):
        staged += take(n)
        stage(migrated_url, "orders", staged[-n:])
        copier.flush()
    query(migrated_url, "SELECT setval('relay_ledger_copy_seq', 1)")
    for n in (2, 3):  # the second flush shows the sequence moved past what Delta has
        staged += take(n)
        stage(migrated_url, "orders", staged[-n:])
        copier.flush()

    copied = in_delta(spark, config.ledger.path)
    print("missing:", sorted(set(staged) - {i for _, i in copied}),
          "staged left:", staged_count(migrated_url))
    assert copied == Counter(("orders", i) for i in staged)
    assert staged_count(migrated_url) == 0


def test_a_ledger_written_before_origin_existed_takes_new_rows_and_still_answers(
    spark: SparkSession, make_config: ConfigFactory, migrated_url: str,
) -> None:
    config = make_config()
    legacy = spark.createDataFrame(
        [("orders", 100, "published", "s-0", "old", None, 9)],
        "topic string, message_id bigint, outcome string, session_id string, source string, "
        "relayed_at timestamp, copy_batch bigint",
    )
    (legacy.write.format("delta").option("txnAppId", "outbox-relay-ledger")
     .option("txnVersion", 9).save(config.ledger.path))
    copier = ledger(spark, config, "copier-a")
    stage(migrated_url, "orders", [1, 2])
    copier.flush()

    assert in_delta(spark, config.ledger.path) == Counter(
        {("orders", 100): 1, ("orders", 1): 1, ("orders", 2): 1})
    assert [(e.source, e.where) for e in copier.lookup("orders", 100)] == [("old", "delta")]
    assert [(e.source, e.where) for e in copier.lookup("orders", 2)] == [("test", "delta")]
    assert staged_count(migrated_url) == 0

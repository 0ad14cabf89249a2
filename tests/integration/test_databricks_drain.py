"""The bundle's drain job, emulated on the local stack: its tasks as Databricks runs them.

The bundle's variables are resolved for the default target as `databricks bundle deploy
--var ...` would, with the stack's addresses as postgres_url and kafka_bootstrap_servers
and a temporary directory as state_volume. The job cluster's environment sets
the checkpoint and the ledger to the target's own paths under state_volume. Each
python_wheel_task runs, migrate first, as tests/integration/databricks_task.py runs a
task: under a real spark-submit, through a launcher that calls the wheel's entry point
as Databricks' does, with the cluster's libraries as --jars. An independent consumer
then reads back every seeded message.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from tests.bundle import load_bundle, maven_coordinates
from tests.integration.databricks_task import TaskRunner, jar_of
from tests.integration.helpers import (
    Msg,
    Received,
    consume,
    create_topics,
    every_key_shape,
    insert,
    partitioning_bytes,
    query,
    unique,
)
from tests.integration.many import Databases, by_database

pytestmark = pytest.mark.integration

JOB = "outbox_relay_drain"
PARTITIONS = 3
PER_TOPIC = 90
# What the relay and Ivy print when jars are resolved or the driver runs once more to get
# them; a cluster's libraries need neither.
NOT_ON_A_CLUSTER = (":: resolving dependencies", "resolving the Spark packages",
                    "running it once more")


def _check_order(seeded: dict[int, Msg], received: list[Received]) -> None:
    """Rows of one partitioning key (partition_key's bytes, else the key) share a partition
    and appear in id order."""
    first: dict[int, Received] = {}
    for record in sorted(received, key=lambda r: (r.topic, r.partition, r.offset)):
        first.setdefault(record.outbox_id, record)
    by_key: dict[tuple[str, bytes], list[Received]] = defaultdict(list)
    for outbox_id, record in first.items():
        msg = seeded[outbox_id]
        pkey = partitioning_bytes(msg.partition_key, msg.key)
        if pkey is not None:
            by_key[(msg.topic, pkey)].append(record)
    for key, records in by_key.items():
        assert len({r.partition for r in records}) == 1, f"{key} spread over partitions"
        offsets = [r.offset for r in sorted(records, key=lambda r: r.outbox_id)]
        assert offsets == sorted(offsets), f"{key}: ids out of order"


def test_the_drain_job_migrates_then_drains_every_key_shape(
    stack: StackInfo, database_url: str, tmp_path: Path
) -> None:
    bundle = load_bundle({"postgres_url": database_url,
                          "kafka_bootstrap_servers": stack.kafka_bootstrap,
                          "state_volume": str(tmp_path / "state")})
    migrate = bundle.command_task(JOB, "migrate")
    relay = bundle.command_task(JOB, "run")
    runner = TaskRunner(bundle.jobs[JOB], tmp_path)
    # The cluster's Maven libraries are in the cache; the rest of --jars is what the
    # runtime ships (Kafka connector, Delta) and a local Spark does not.
    libraries = {jar_of(c, runner.jars) for c in maven_coordinates(relay)}
    assert libraries and maven_coordinates(migrate) == maven_coordinates(relay)

    code = runner.run(migrate, tmp_path / "migrate.log")
    assert code == ExitCode.OK, (tmp_path / "migrate.log").read_text(errors="replace")[-3000:]

    topics = [unique("dbx-drain"), unique("dbx-drain")]
    create_topics(stack.kafka_bootstrap, dict.fromkeys(topics, PARTITIONS))
    messages = every_key_shape(topics, PER_TOPIC)
    ids = insert(database_url, [messages[i:i + 40] for i in range(0, len(messages), 40)])
    seeded = dict(zip(ids, messages, strict=True))

    log = tmp_path / "relay.log"
    code = runner.run(relay, log)
    output = log.read_text(errors="replace")
    assert code == ExitCode.OK, output[-3000:]
    assert not [line for line in NOT_ON_A_CLUSTER if line in output], output[-3000:]

    received = consume(stack.kafka_bootstrap, topics, expect=len(seeded))
    assert {r.outbox_id for r in received} == set(seeded)
    for record in received:
        msg = seeded[record.outbox_id]
        assert (record.topic, record.key, record.value) == (msg.topic, msg.key, msg.value)
    _check_order(seeded, received)
    assert query(database_url, "SELECT count(*) FROM kafka_messages") == [(0,)]
    # The target's own ledger, where the cluster's environment put it. (No checkpoint:
    # a backlog this small drains in the start-up round, before any streaming query.)
    assert (tmp_path / "state" / bundle.target / "ledger" / "_delta_log").is_dir()


def test_the_drain_job_migrates_and_drains_every_database_of_a_profile_of_several(
    stack: StackInfo, databases: Databases, tmp_path: Path
) -> None:
    """The bundle's profile with two [[databases]] (docs/many-databases.md, Deployments):
    its migrate task migrates both, its run task drains both, and each database's ledger
    goes under the target's own path."""
    entries = databases(2)
    bundle = load_bundle({"postgres_url": entries[0][1],
                          "kafka_bootstrap_servers": stack.kafka_bootstrap,
                          "state_volume": str(tmp_path / "state")})
    runner = TaskRunner(bundle.jobs[JOB], tmp_path, {
        "databases": [{"name": name, "url": url} for name, url in entries]})
    code = runner.run(bundle.command_task(JOB, "migrate"), tmp_path / "migrate.log")
    assert code == ExitCode.OK, (tmp_path / "migrate.log").read_text(errors="replace")[-3000:]

    # One topic both databases publish to, the same rows in each.
    topic = unique("dbx-many")
    create_topics(stack.kafka_bootstrap, {topic: PARTITIONS})
    messages = every_key_shape([topic], PER_TOPIC)
    seeded = {name: dict(zip(insert(url, [messages]), messages, strict=True))
              for name, url in entries}

    log = tmp_path / "relay.log"
    code = runner.run(bundle.command_task(JOB, "run"), log)
    assert code == ExitCode.OK, log.read_text(errors="replace")[-3000:]

    received = by_database(consume(stack.kafka_bootstrap, [topic], expect=2 * len(messages)),
                           runner.profile["relay"]["source_name"], seeded)
    for name, url in entries:
        assert {r.outbox_id for r in received[name]} == set(seeded[name]), name
        _check_order(seeded[name], received[name])
        assert query(url, "SELECT count(*) FROM kafka_messages") == [(0,)]
        assert (tmp_path / "state" / bundle.target / "ledger" / name / "_delta_log").is_dir()


def test_a_drain_that_leaves_a_topic_over_is_a_task_success_with_a_warning(
    stack: StackInfo, migrated_url: str, tmp_path: Path
) -> None:
    """LEFT_OVER's outcome is WARN in every runner (docs/exit-codes.md): the entry point
    returns, so the task succeeds, and its log names the topic that waits. Retried or
    mailed every 5 minutes, a topic in error would not drain any sooner."""
    bundle = load_bundle({"postgres_url": migrated_url,
                          "kafka_bootstrap_servers": stack.kafka_bootstrap,
                          "state_volume": str(tmp_path / "state")})
    relay = bundle.command_task(JOB, "run")
    # The schema is migrated already (migrated_url): no migrate task, one spark-submit less.
    # The deadline only bounds the wait for the locked topic.
    runner = TaskRunner(bundle.jobs[JOB], tmp_path, {"relay": {"available_now_deadline_s": 5}})
    free, locked = unique("dbx-free"), unique("dbx-locked")
    create_topics(stack.kafka_bootstrap, {free: 1, locked: 1})
    ids = insert(migrated_url, [[Msg(free, f"k{i}".encode(), f"v{i}".encode())
                                 for i in range(20)]])
    insert(migrated_url, [[Msg(locked, b"k", b"waits")]])
    # Another relay holds this topic's lock for the whole test.
    query(migrated_url, "INSERT INTO kafka_topic_info (topic, locked_by, locked_at) "
          "VALUES (%s, 'another-relay', now() AT TIME ZONE 'UTC' + interval '1 hour')",
          (locked,))

    log = tmp_path / "relay.log"
    code = runner.run(relay, log)
    output = log.read_text(errors="replace")

    assert code == 0, output[-3000:]
    (warning,) = [line for line in output.splitlines() if line.startswith("outbox-relay-task:")]
    assert "exited with 1 (LEFT_OVER" in warning and "warning" in warning, warning
    assert f"left over: topic {locked}" in output
    assert {r.outbox_id for r in consume(stack.kafka_bootstrap, [free], expect=len(ids))} \
        == set(ids)
    assert query(migrated_url, "SELECT topic FROM kafka_messages") == [(locked,)]

"""The bundle's drain job, emulated on the local stack: its tasks as Databricks runs them.

The bundle's variables are resolved for the default target as `databricks bundle deploy
--var ...` would, with the stack's addresses as postgres_url and kafka_bootstrap_servers
and a temporary directory as state_volume. The job cluster's spark_env_vars become the
environment (its `{{secrets/...}}` cannot resolve here; the local stack needs none), so
the checkpoint and the ledger are the target's own paths under state_volume. Each
python_wheel_task runs, migrate first, under a real spark-submit through a launcher that
does what Databricks' does: it finds the task's entry point by name among the installed
distribution's entry points, sets `sys.argv` to the task's parameters and calls it,
dropping what it returns. `${workspace.file_path}` names a stand-in for the synced files
whose conf/databricks.toml is the bundle's profile adapted to the local stack (no TLS, no
SASL). The jars come from the local cache (outbox_relay.launch.spark_jars, what `outbox-relay
jars` prints) as `--jars`, as a cluster's libraries do: the bundle's Maven libraries,
and what a Databricks Runtime ships itself (the Kafka connector, Delta), which a local
Spark lacks. An independent consumer then reads back every seeded message.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from outbox_relay.exit_codes import ExitCode
from outbox_relay.launch.spark_jars import cached_jars
from outbox_relay.stack import StackInfo
from tests.bundle import PROFILE, load_bundle, maven_coordinates, task_parameters
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
from tests.integration.process import write_raw_profile

pytestmark = pytest.mark.integration

JOB = "outbox_relay_drain"
PARTITIONS = 3
PER_TOPIC = 90
SECURITY_PREFIXES = ("security.", "sasl.", "ssl.")
# What the relay and Ivy print when jars are resolved or the driver runs once more to get
# them; a cluster's libraries need neither.
NOT_ON_A_CLUSTER = (":: resolving dependencies", "resolving the Spark packages",
                    "running it once more")
# Databricks' wheel launcher, reduced to what decides the outcome: the entry point is
# looked up by name in the distribution's metadata and called; what it returns is dropped,
# so only an exception fails the task (the CLI's python_wheel_wrapper does the same).
LAUNCHER = """\
import sys
from importlib import metadata

package, name, *parameters = sys.argv[1:]
sys.argv = [package, *parameters]
(entry,) = [ep for ep in metadata.distribution(package).entry_points if ep.name == name]
entry.load()()
"""


def _workspace_files(root: Path, relay: dict[str, Any] | None = None) -> Path:
    """Where the job's parameters find conf/databricks.toml: the bundle's profile with only
    what the local stack needs changed (and `relay`'s keys, a test's). The stack speaks
    plaintext, and Databricks' shaded login module (kafkashaded....) loads only inside its
    own Kafka connector."""
    data: dict[str, Any] = tomllib.loads(PROFILE.read_text(encoding="utf-8"))
    data["postgres"]["sslmode"] = "disable"
    data["relay"].update(relay or {})
    for table in ("java_options", "librdkafka_options"):
        options = data["kafka"].get(table, {})
        data["kafka"][table] = {k: v for k, v in options.items()
                                if not k.startswith(SECURITY_PREFIXES)}
    assert data["spark"]["resolve_packages"] is False, "a cluster's jars are its libraries"
    (root / "conf").mkdir(parents=True)
    write_raw_profile(data, root / "conf" / PROFILE.name)
    return root


def _jar_of(coordinate: str, jars: list[Path]) -> Path:
    """The cached jar of a Maven coordinate group:artifact:version."""
    _, artifact, version = coordinate.split(":")
    found = [p for p in jars if p.name == f"{artifact}-{version}.jar"]
    assert len(found) == 1, f"{coordinate}: one cached jar expected, got {found}"
    return found[0]


def _cluster_env(job: dict[str, Any], spark_conf: Path) -> dict[str, str]:
    """The process environment of the job cluster, less what only a workspace resolves.

    An empty Spark configuration directory: a cluster has no spark-defaults.conf of ours
    (`outbox-relay jars --install` writes the jars into the local one)."""
    (cluster,) = [c["new_cluster"] for c in job["job_clusters"]]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "KAFKA_"))}
    env.update({k: v for k, v in cluster["spark_env_vars"].items()
                if not v.startswith("{{secrets/")})
    spark_conf.mkdir()
    env["SPARK_CONF_DIR"] = str(spark_conf)
    env["PYSPARK_PYTHON"] = sys.executable
    return env


def _run_task(task: dict[str, Any], launcher: Path, workspace: Path, jars: list[Path],
              env: dict[str, str], log: Path) -> int:
    submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent))
    assert submit, "spark-submit is installed with pyspark"
    wheel_task = task["python_wheel_task"]
    command = [submit, "--master", "local[2]", "--jars", ",".join(map(str, jars)),
               str(launcher), wheel_task["package_name"], wheel_task["entry_point"],
               *task_parameters(task, workspace)]
    with log.open("wb") as out:
        done = subprocess.run(command, cwd=workspace, env=env, stdout=out,
                              stderr=subprocess.STDOUT, timeout=900, check=False)
    return done.returncode


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
    job = bundle.jobs[JOB]
    migrate = bundle.command_task(JOB, "migrate")
    relay = bundle.command_task(JOB, "run")
    workspace = _workspace_files(tmp_path / "files")
    launcher = tmp_path / "wheel_launcher.py"
    launcher.write_text(LAUNCHER, encoding="utf-8")
    jars = cached_jars()
    # The cluster's Maven libraries are in the cache; the rest of --jars is what the
    # runtime ships (Kafka connector, Delta) and a local Spark does not.
    libraries = {_jar_of(c, jars) for c in maven_coordinates(relay)}
    assert libraries and maven_coordinates(migrate) == maven_coordinates(relay)
    env = _cluster_env(job, tmp_path / "spark-conf")

    code = _run_task(migrate, launcher, workspace, jars, env, tmp_path / "migrate.log")
    assert code == ExitCode.OK, (tmp_path / "migrate.log").read_text(errors="replace")[-3000:]

    topics = [unique("dbx-drain"), unique("dbx-drain")]
    create_topics(stack.kafka_bootstrap, dict.fromkeys(topics, PARTITIONS))
    messages = every_key_shape(topics, PER_TOPIC)
    ids = insert(database_url, [messages[i:i + 40] for i in range(0, len(messages), 40)])
    seeded = dict(zip(ids, messages, strict=True))

    log = tmp_path / "relay.log"
    code = _run_task(relay, launcher, workspace, jars, env, log)
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
    workspace = _workspace_files(tmp_path / "files", {"available_now_deadline_s": 5})
    launcher = tmp_path / "wheel_launcher.py"
    launcher.write_text(LAUNCHER, encoding="utf-8")
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
    code = _run_task(relay, launcher, workspace, cached_jars(),
                     _cluster_env(bundle.jobs[JOB], tmp_path / "spark-conf"), log)
    output = log.read_text(errors="replace")

    assert code == 0, output[-3000:]
    (warning,) = [line for line in output.splitlines() if line.startswith("outbox-relay-task:")]
    assert "exited with 1 (LEFT_OVER" in warning and "warning" in warning, warning
    assert f"left over: topic {locked}" in output
    assert {r.outbox_id for r in consume(stack.kafka_bootstrap, [free], expect=len(ids))} \
        == set(ids)
    assert query(migrated_url, "SELECT topic FROM kafka_messages") == [(locked,)]

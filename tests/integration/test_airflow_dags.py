"""The Airflow tier, from the main session: seed outboxes on the shared stack, run
tests/airflow (DagBag, structure, `dag.test()` through a real spark-submit, the
Databricks DAG against a Jobs API stand-in), then check with an independent consumer
that every seeded message arrived. Once in each Airflow venv: `.venv-airflow`, the
newest Airflow and providers, and `.venv-airflow-oldest`, the oldest Airflow 3 the
providers accept with the Spark provider's previous minor version, so the DAGs run at
both ends of the range docs/airflow.md states and on the provider's newest two minors.

`make test` installs both venvs first; without them these tests fail, they do not skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pyspark
import pytest
from packaging.version import Version

from outbox_relay.config.env import reads_variable
from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import SCHEMAS_DIR, migrate
from outbox_relay.stack import StackInfo
from tests.integration.helpers import (
    Received,
    consume,
    create_topics,
    partitioning_bytes,
    query,
    unique,
)
from tests.integration.many import SOURCE, by_database, profile_data
from tests.integration.process import REPO, write_profile, write_raw_profile

pytestmark = pytest.mark.integration

# Each venv and the requirements files whose pins it installs, the later one winning
# (Makefile, airflow-venv).
VENVS = {"newest": (".venv-airflow", ["airflow.txt"]),
         "oldest": (".venv-airflow-oldest", ["airflow.txt", "airflow-oldest.txt"])}
AIRFLOW = "apache-airflow"
SPARK_PROVIDER = "apache-airflow-providers-apache-spark"
# Deimos's own columns: the outbox as Deimos wrote it, before the relay's migrations.
# The databases of the profile of several, which share one topic.
MANY = ("eu", "us")
DEIMOS_INSERT = "INSERT INTO kafka_messages (topic, message, key, partition_key) " \
                "VALUES (%s, %s, %s, %s) RETURNING id"


@pytest.fixture(params=list(VENVS))
def venv(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def databases(stack: StackInfo) -> Iterator[dict[str, str]]:
    """Fresh databases of their own: an outbox as Deimos left it, a migrated one, and the
    two of a profile of several (eu and us)."""
    base = stack.postgres_url.rpartition("/")[0]
    names = {k: f"t_airflow_{k}_{uuid.uuid4().hex[:8]}"
             for k in ("deimos", "locked", *MANY)}
    admin = psycopg2.connect(stack.postgres_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        for name in names.values():
            cur.execute(f'CREATE DATABASE "{name}"')  # generated identifiers
    yield {k: f"{base}/{name}" for k, name in names.items()}
    with admin.cursor() as cur:
        for name in names.values():
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


def _profile(stack: StackInfo, url: str, topics: list[str], tmp: Path, name: str) -> str:
    config = build_config({
        "postgres": {"url": url, "sslmode": "disable"},
        "kafka": {"bootstrap_servers": stack.kafka_bootstrap},
        "ledger": {"path": str(tmp / f"ledger-{name}"), "flush_interval_s": 2},
        "relay": {"source_name": f"airflow-{name}", "checkpoint_path": str(tmp / f"cp-{name}"),
                  "poll_interval_s": 0.1, "available_now_deadline_s": 5,
                  "include_topics": [t.replace(".", "\\.") for t in topics]},
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
    }, env={})
    return str(write_profile(config, tmp / f"{name}.toml"))


def _many_profile(stack: StackInfo, urls: dict[str, str], topic: str, tmp: Path) -> str:
    data = profile_data(stack, tmp / "many", [(name, urls[name]) for name in MANY], [topic])
    data["spark"] = {"master": "local[2]", "shuffle_partitions": 2}
    return str(write_raw_profile(data, tmp / "many.toml"))


def _in_key_order(records: list[Received],
                  by_id: dict[int, tuple[str, bytes, bytes | None, str | None]]) -> bool:
    """Whether each key's first deliveries came in the order of its ids, per partition."""
    first_seen: dict[tuple[str, bytes], list[int]] = {}
    for record in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        _, _, key, partition_key = by_id[record.outbox_id]
        order_key = partitioning_bytes(partition_key, key)
        if order_key is not None:
            seen = first_seen.setdefault((record.topic, order_key), [])
            if record.outbox_id not in seen:
                seen.append(record.outbox_id)
    return all(seen == sorted(seen) for seen in first_seen.values())


def _key_shapes(topic: str, n: int) -> list[tuple[str, bytes, bytes | None, str | None]]:
    """Rows of every key shape: partition_key NULL, equal to the key, different from it;
    NULL keys with and without a partition_key."""
    rows = []
    for i in range(n):
        key = f"k{i % 7}".encode()
        shape = i % 5
        rows.append((topic, f"v{i}".encode(), *{
            0: (key, None), 1: (key, key.decode()), 2: (key, f"p{i % 3}"),
            3: (None, None), 4: (None, f"p{i % 3}")}[shape]))
    return rows


def _seed(url: str, rows: list[tuple[str, bytes, bytes | None, str | None]],
          deimos_tables: bool = False) -> list[int]:
    """Insert `rows`; first create Deimos's tables the way Deimos does, if asked."""
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            if deimos_tables:
                cur.execute((SCHEMAS_DIR / "0001_deimos_tables.sql").read_text(encoding="utf-8"))
            ids = []
            for row in rows:
                cur.execute(DEIMOS_INSERT, row)
                ids.append(cur.fetchone()[0])
            return ids
    finally:
        conn.close()


def _pinned(venv: str, package: str) -> str:
    """The version of `package` that `venv`'s requirements pin."""
    version = ""
    for requirements in VENVS[venv][1]:
        text = (REPO / "requirements" / requirements).read_text(encoding="utf-8")
        for line in text.splitlines():
            if line.startswith(f"{package}=="):
                version = line.partition("==")[2].strip()
    assert version, f"{venv}: no pin of {package}"
    return version


def _run_airflow_tier(python: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "pytest", "tests/airflow", "-q", "--durations=8"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1200,
    )


def _passed(done: subprocess.CompletedProcess[str]) -> None:
    output = done.stdout[-20000:] + done.stderr[-5000:]
    # 5 would mean pytest collected nothing: the tier did not run, which is no pass.
    assert done.returncode == 0, f"Airflow tier exited {done.returncode}:\n{output}"
    # The version check skips only when no version is named (its reason, in the summary
    # that -ra prints): here one always is.
    assert "no version named" not in done.stdout, output


def test_the_two_venvs_pin_the_spark_providers_newest_two_minor_versions() -> None:
    newest = Version(_pinned("newest", SPARK_PROVIDER))
    previous = Version(_pinned("oldest", SPARK_PROVIDER))

    assert (previous.major, previous.minor + 1) == (newest.major, newest.minor)


def test_the_page_states_the_range_of_airflow_versions_the_venvs_test() -> None:
    page = (REPO / "docs" / "airflow.md").read_text(encoding="utf-8")
    oldest, newest = _pinned("oldest", AIRFLOW), _pinned("newest", AIRFLOW)

    assert Version(oldest).major == 3 and Version(oldest) < Version(newest)
    assert f"Airflow {oldest} to {newest}" in " ".join(page.split())


def test_airflow_dags_drain_the_outbox(venv: str, stack: StackInfo, databases: dict[str, str],
                                       tmp_path: Path) -> None:
    python = REPO / VENVS[venv][0] / "bin" / "python"
    assert python.exists(), f"no {VENVS[venv][0]}: `make airflow-venv` installs it"
    drained = [unique("airflow.a"), unique("airflow.b")]
    free, locked = unique("airflow.free"), unique("airflow.locked")
    shared = unique("airflow.many")
    create_topics(stack.kafka_bootstrap,
                  {**{t: 3 for t in drained}, free: 2, locked: 2, shared: 3})

    rows = [r for t in drained for r in _key_shapes(t, 150)]
    ids = _seed(databases["deimos"], rows, deimos_tables=True)

    config = build_config({"postgres": {"url": databases["locked"]}}, env={})
    db = Database(config.postgres)
    try:
        migrate(db)
    finally:
        db.close()
    free_ids = _seed(databases["locked"], _key_shapes(free, 20))
    _seed(databases["locked"], _key_shapes(locked, 10))
    # Another relay holds this topic's lock for the whole test.
    query(databases["locked"], "INSERT INTO kafka_topic_info (topic, locked_by, locked_at) "
          "VALUES (%s, 'another-relay', now() AT TIME ZONE 'UTC' + interval '1 hour')",
          (locked,))

    # Deimos's outboxes, which the migrate task migrates: the same rows in each.
    many_rows = _key_shapes(shared, 60)
    many_ids = {name: _seed(databases[name], many_rows, deimos_tables=True) for name in MANY}

    bad = tmp_path / "bad.toml"
    bad.write_text('[relay]\nno_such_setting = 1\n', encoding="utf-8")
    scenarios: dict[str, Any] = {
        "drain": {"profile": _profile(stack, databases["deimos"], drained, tmp_path, "drain")},
        "left_over": {"profile": _profile(stack, databases["locked"], [free, locked], tmp_path,
                                          "left-over"), "locked_topic": locked},
        "many": {"profile": _many_profile(stack, databases, shared, tmp_path)},
        "usage": {"profile": str(bad)},
    }
    (tmp_path / "scenarios.json").write_text(json.dumps(scenarios), encoding="utf-8")
    relay_bin = Path(sys.executable).parent
    # The relay's environment overrides (e.g. from `outbox-relay stack env`) would win
    # over the scenarios' profiles.
    inherited = {k: v for k, v in os.environ.items() if not reads_variable(k)}
    env = {
        **inherited,
        "OUTBOX_RELAY_AIRFLOW_SCENARIOS": str(tmp_path / "scenarios.json"),
        "OUTBOX_RELAY_HOME": str(REPO),
        # The relay venv's spark-submit (the provider runs the one on PATH) and Python.
        "PATH": f"{relay_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "OUTBOX_RELAY_PYSPARK_PYTHON": sys.executable,
        # As a Spark installation sets it. Without it, pyspark's launcher scripts look for
        # Spark with PYSPARK_PYTHON, and one without pyspark (a test's) would exit 127.
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "AIRFLOW_CONN_SPARK_RELAY_TEST": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "OUTBOX_RELAY_SPARK_CONN_ID": "spark_relay_test",
        "OUTBOX_RELAY_AIRFLOW": _pinned(venv, AIRFLOW),
        "OUTBOX_RELAY_SPARK_PROVIDER": _pinned(venv, SPARK_PROVIDER),
    }

    started = time.monotonic()
    done = _run_airflow_tier(python, env)
    took = time.monotonic() - started

    _passed(done)
    print(f"Airflow tier in {VENVS[venv][0]}: {took:.0f} s\n{done.stdout}")

    got = consume(stack.kafka_bootstrap, drained, expect=len(ids))
    assert {r.outbox_id for r in got} == set(ids), "every seeded message arrives"
    by_id = {i: row for i, row in zip(ids, rows, strict=True)}
    for record in got:
        topic, value, key, _ = by_id[record.outbox_id]
        assert (record.topic, record.value, record.key) == (topic, value, key)
    assert _in_key_order(got, by_id), "per-key order"
    assert query(databases["deimos"], "SELECT count(*) FROM kafka_messages")[0][0] == 0

    got_free = consume(stack.kafka_bootstrap, [free], expect=len(free_ids))
    assert {r.outbox_id for r in got_free} == set(free_ids)
    left = query(databases["locked"], "SELECT topic, count(*) FROM kafka_messages GROUP BY 1")
    assert left == [(locked, 10)], "the locked topic waits for its owner"

    # Both databases' rows on their shared topic, each named by its source header: every
    # id of each once at least, in key order within each database.
    got_many = by_database(consume(stack.kafka_bootstrap, [shared],
                                   expect=sum(map(len, many_ids.values()))), SOURCE, MANY)
    for name in MANY:
        assert {r.outbox_id for r in got_many[name]} == set(many_ids[name]), name
        assert _in_key_order(got_many[name], dict(zip(many_ids[name], many_rows, strict=True)))
        assert query(databases[name], "SELECT count(*) FROM kafka_messages")[0][0] == 0

"""`outbox-relay status` against a real outbox in every state, read back independently.

The CLI runs as its own process, through a probe that records every module it imported
and every process it tried to start (Python's audit hooks): it must import no pyspark and
start nothing, so no JVM. Its JSON is checked against what this test reads from
PostgreSQL and, for the Delta ledger that a real relay run wrote, through Spark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from outbox_relay.config import Config
from outbox_relay.control.db import Database
from outbox_relay.control.locks import Backoff, TopicLocks
from outbox_relay.exit_codes import ExitCode
from outbox_relay.observe.status import take_snapshot
from outbox_relay.stack import StackInfo
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import Msg, create_topics, insert, query, unique
from tests.integration.process import REPO, write_profile

pytestmark = pytest.mark.integration

PROBE = """
import json, os, sys
spawned = []
def hook(event, args):
    if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork", "os.forkpty",
                 "os.system", "os.spawn"):
        spawned.append(event)
sys.addaudithook(hook)
from outbox_relay.cli import main
code = main(sys.argv[1:])
with open(os.environ["STATUS_PROBE"], "w") as f:
    json.dump({"modules": sorted(sys.modules), "spawned": spawned}, f)
sys.exit(code)
"""

SEEDED_AGE_S = 600


@dataclass
class Outbox:
    url: str
    profile: Path
    config: Config
    ready: str
    live: str
    dead: str
    backoff: str
    parked: str
    drained: str
    holder_pid: int


def run_cli(tmp_path: Path, profile: Path, *args: str) -> tuple[int, str, str, dict[str, Any]]:
    probe = tmp_path / f"probe-{uuid.uuid4().hex[:6]}.json"
    script = tmp_path / "probe.py"
    script.write_text(PROBE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(STATUS_PROBE=str(probe), PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, str(script), "--config", str(profile), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    seen = json.loads(probe.read_text()) if probe.exists() else {}
    return done.returncode, done.stdout, done.stderr, seen


AGO = "now() AT TIME ZONE 'UTC' - make_interval(secs => %s)"


def _plant_states(url: str, o: dict[str, str]) -> None:
    """The lock and error states as relays leave them (outbox_relay.control.locks)."""
    conn = psycopg2.connect(url)
    with conn, conn.cursor() as cur:
        cur.execute("INSERT INTO kafka_topic_info (topic) SELECT unnest(%s::varchar[]) "
                    "ON CONFLICT (topic) DO NOTHING", ([o["live"], o["dead"], o["backoff"]],))
        cur.execute("UPDATE kafka_topic_info SET locked_by = 'relay-a:live-token', "
                    "locked_at = now() AT TIME ZONE 'UTC' WHERE topic = %s", (o["live"],))
        cur.execute("UPDATE kafka_topic_info SET locked_by = 'relay-b:dead-token', "
                    "locked_at = " + AGO + " WHERE topic = %s", (3600, o["dead"]))
        cur.execute("UPDATE kafka_topic_info SET error = true, retries = 3, "
                    "last_error = 'broker said: RECORD_TOO_LARGE', locked_by = NULL, "
                    "locked_at = now() AT TIME ZONE 'UTC', next_retry_at = now() AT TIME ZONE "
                    "'UTC' + interval '10 minutes' WHERE topic = %s", (o["backoff"],))
        cur.execute("INSERT INTO relay_parked_messages (id, topic, message, key, created_at, "
                    "reason, source) SELECT g, %s, 'v', 'k', now() AT TIME ZONE 'UTC', "
                    "'too large', 'test' FROM generate_series(900000001, 900000003) g",
                    (o["parked"],))
        # The ready topic's rows were written SEEDED_AGE_S ago.
        cur.execute("UPDATE kafka_messages SET created_at = " + AGO + " WHERE topic = %s",
                    (SEEDED_AGE_S, o["ready"]))
    conn.close()


@pytest.fixture
def outbox(stack: StackInfo, make_config: ConfigFactory, migrated_url: str,
           run_relay: RelayRunner, tmp_path: Path) -> Iterator[Outbox]:
    names = {k: unique(f"st-{k}") for k in ("ready", "live", "dead", "backoff", "parked",
                                             "drained")}
    drained = names["drained"]
    create_topics(stack.kafka_bootstrap, {drained: 2})
    config = make_config([drained])
    # A real relay drains and copies its ledger records to Delta...
    insert(migrated_url, [[Msg(drained, f"k{i}".encode(), b"v") for i in range(40)]])
    assert run_relay(config).exit_code == ExitCode.OK
    # ...then drains more, but can't copy them (its ledger path is under a plain file).
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    insert(migrated_url, [[Msg(drained, b"k", b"v2") for _ in range(15)]])
    blocked = make_config([drained], ledger={"path": str(blocker / "ledger")})
    assert run_relay(blocked).exit_code == ExitCode.OK
    insert(migrated_url, [[Msg(names[k], b"key", b"value") for _ in range(n)]
                          for k, n in (("ready", 30), ("live", 5), ("dead", 4),
                                       ("backoff", 3))])
    _plant_states(migrated_url, names)
    holder = psycopg2.connect(migrated_url)
    with holder.cursor() as cur:  # left open: it holds the horizon back
        cur.execute("SELECT pg_current_xact_id(), pg_backend_pid()")
        pid = cur.fetchone()[1]
    time.sleep(1.5)
    yield Outbox(migrated_url, write_profile(config, tmp_path / "profile.toml"), config,
                 holder_pid=pid, **names)
    holder.rollback()
    holder.close()


def _independent(url: str) -> dict[str, Any]:
    return {
        "waiting": dict(query(url, "SELECT topic, count(*) FROM kafka_messages GROUP BY 1")),
        "parked": dict(query(url, "SELECT topic, count(*) FROM relay_parked_messages GROUP BY 1")),
        "staged": {t: (int(r), int(m)) for t, r, m in query(
            url, "SELECT topic, count(*), sum(cardinality(ids)) FROM relay_ledger_staging "
                 "GROUP BY 1")},
        "oldest": {t: c for t, c in query(
            url, "SELECT DISTINCT ON (topic) topic, created_at FROM kafka_messages "
                 "ORDER BY topic, id")},
    }


def _dead_tuples(url: str) -> int:
    return int(query(url, "SELECT n_dead_tup FROM pg_stat_user_tables "
                          "WHERE relid = 'kafka_messages'::regclass")[0][0])


def _delta_rows(spark: SparkSession, path: str, topic: str, since: datetime) -> int:
    table = spark.read.format("delta").load(path)
    return table.where((F.col("topic") == topic) & (F.col("relayed_at") >= since)).count()


def test_status_json_matches_the_database_and_starts_no_jvm(
    outbox: Outbox, spark: SparkSession, tmp_path: Path
) -> None:
    dead_tuples = {_dead_tuples(outbox.url)}
    code, out, err, seen = run_cli(tmp_path, outbox.profile, "status", "--json")
    dead_tuples.add(_dead_tuples(outbox.url))
    assert code == ExitCode.OK, err
    assert not [m for m in seen["modules"] if m.split(".")[0] in ("pyspark", "py4j")]
    assert seen["spawned"] == [], "status started a process"
    report = json.loads(out)
    db = _independent(outbox.url)
    topics = {t["topic"]: t for t in report["topics"]}
    assert set(topics) >= set(db["waiting"]) | set(db["parked"]) | {outbox.drained}
    now = datetime.fromisoformat(report["generated_at"])
    for name, count in db["waiting"].items():
        t = topics[name]
        assert (t["backlog"], t["backlog_exact"]) == (count, True)
        created = db["oldest"][name]
        assert t["oldest_created_at"] == created.isoformat() + "Z"
        assert t["oldest_age_s"] == pytest.approx(
            (now.replace(tzinfo=None) - created).total_seconds(), abs=0.01)
    assert topics[outbox.ready]["oldest_age_s"] == pytest.approx(SEEDED_AGE_S, abs=30)
    assert topics[outbox.ready]["max_wait_s"] == topics[outbox.ready]["oldest_age_s"]
    assert topics[outbox.ready]["state"] == "ready"

    live, dead = topics[outbox.live], topics[outbox.dead]
    assert (live["state"], live["lock"]["by"], live["lock"]["alive"]) == (
        "locked", "relay-a:live-token", True)
    assert (dead["state"], dead["lock"]["by"], dead["lock"]["alive"]) == (
        "locked", "relay-b:dead-token", False)
    assert now - datetime.fromisoformat(dead["lock"]["since"]) >= timedelta(minutes=59)

    backoff = topics[outbox.backoff]
    assert (backoff["state"], backoff["retries"]) == ("backoff", 3)
    assert backoff["error"]["last_error"] == "broker said: RECORD_TOO_LARGE"
    assert backoff["error"]["retry_in_s"] == pytest.approx(600, abs=30)

    parked = topics[outbox.parked]
    assert (parked["parked"], parked["backlog"], parked["state"]) == (3, 0, "ready")
    assert parked["oldest_age_s"] is None and parked["max_wait_s"] == 0

    drained = topics[outbox.drained]
    assert (drained["backlog"], drained["state"], drained["max_wait_s"]) == (0, "ready", 0)
    assert drained["last_processed_at"] is not None
    staged_records, staged_messages = db["staged"][outbox.drained]
    assert staged_messages == 15
    assert (drained["ledger"]["staged_records"], drained["ledger"]["staged_messages"]) == (
        staged_records, staged_messages)
    assert report["ledger"]["staged_records"] == sum(r for r, _ in db["staged"].values())
    assert report["ledger"]["oldest_staged_age_s"] > 0
    # The Delta rows, read by Spark here and by delta-rs in the CLI.
    path = outbox.config.ledger.path
    in_delta = {w: _delta_rows(spark, path, outbox.drained, now - timedelta(minutes=w))
                for w in (5, 60)}
    assert in_delta[60] == 40
    assert report["ledger"]["delta_exists"] and report["ledger"]["delta_error"] is None
    assert drained["ledger"]["per_min_5m"] == pytest.approx((in_delta[5] + 15) / 5, abs=1e-3)
    assert drained["ledger"]["per_min_60m"] == pytest.approx((40 + 15) / 60, abs=1e-3)

    horizon = report["horizon"]
    assert (horizon["kind"], horizon["pid"], horizon["wrote"]) == (
        "backend", outbox.holder_pid, True)
    assert horizon["age_s"] >= 1.0
    assert report["queue_table"]["dead_tuples"] in dead_tuples
    assert report["healthy"] is True and report["problems"] == []


THRESHOLD_CASES: list[tuple[tuple[str, ...], ExitCode, str | None]] = [
    ((), ExitCode.OK, None),
    (("--max-age-s", "100000"), ExitCode.OK, None),
    (("--max-age-s", "60"), ExitCode.UNHEALTHY, "ready"),
    (("--fail-on", "backoff"), ExitCode.UNHEALTHY, "backoff"),
    (("--fail-on", "parked"), ExitCode.UNHEALTHY, "parked"),
    (("--fail-on", "backoff,locked"), ExitCode.USAGE, None),
]


def test_thresholds_set_the_exit_code_and_an_estimate_is_marked(
    outbox: Outbox, tmp_path: Path
) -> None:
    for args, expect, named in THRESHOLD_CASES:
        code, out, err, _ = run_cli(tmp_path, outbox.profile, "status", "--no-delta", *args)
        assert code == expect, (args, err)
        if named is not None:
            assert getattr(outbox, named) in err, (args, err)
            assert getattr(outbox, named) in out  # the table is printed all the same
            others = {"ready", "backoff", "parked"} - {named}
            assert not [n for n in others if getattr(outbox, n) in err], (args, err)
        if expect == ExitCode.USAGE:
            assert "'locked'" in err
    code, out, err, _ = run_cli(tmp_path, outbox.profile, "status", "--json", "--no-delta",
                                "--exact-up-to", "10")
    assert code == ExitCode.OK, err
    ready = {t["topic"]: t for t in json.loads(out)["topics"]}[outbox.ready]
    # Its 30 rows are contiguous ids: the density estimate is exact, and marked estimated.
    assert (ready["backlog"], ready["backlog_exact"]) == (30, False)


def test_status_says_backoff_exactly_when_a_relay_may_not_take_the_topic(
    make_config: ConfigFactory, migrated_url: str
) -> None:
    """The backoff rule is one definition (outbox_relay.control.locks.IN_BACKOFF); this pins that
    status and the lock statement read it alike, Deimos's rows without next_retry_at too."""
    cases = {  # topic -> (next_retry_at offset s, locked_at offset s), both None-able
        "future-retry": (300, 0), "past-retry": (-1, -10),
        "deimos-recent": (None, -30), "deimos-old": (None, -120), "no-times": (None, None),
    }
    conn = psycopg2.connect(migrated_url)
    with conn, conn.cursor() as cur:
        for name, (retry, locked) in cases.items():
            cur.execute(
                "INSERT INTO kafka_topic_info (topic, error, retries, next_retry_at, locked_at) "
                "VALUES (%s, true, 2, now() AT TIME ZONE 'UTC' + make_interval(secs => %s), "
                "now() AT TIME ZONE 'UTC' + make_interval(secs => %s))", (name, retry, locked))
    conn.close()
    config = make_config()
    db = Database(config.postgres)
    try:
        states = {t.topic: t.state for t in take_snapshot(db, 20.0, "no-ledger",
                                                          with_rates=False).topics}
        locks = TopicLocks(db, "token-x", 20.0, Backoff(1.0, 2.0))
        taken = set(locks.acquire(list(cases)))
    finally:
        db.close()
    assert {t for t, s in states.items() if s == "backoff"} == set(cases) - taken
    assert taken == {"past-retry", "deimos-old", "no-times"}

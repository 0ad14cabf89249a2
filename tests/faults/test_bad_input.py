"""Scenario 8: hostile input, and a password that must never reach a log line.

Topic names with quotes, semicolons and unicode are illegal in Kafka: poison for the
whole topic. Headers under the reserved prefix (a forged outbox id or source would
fool every consumer's dedupe), with non-string values or not an object at all: a
clear per-message error that the topic's policy handles. The relay connects as a
PostgreSQL role that must present its password (scram-sha-256), given only through
RELAY_POSTGRES_PASSWORD; afterwards every file the run wrote is searched for it.
"""

from __future__ import annotations

import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from pydantic import SecretStr
from pyspark.sql import SparkSession

from outbox_relay.control.db import Database
from outbox_relay.control.migrate import migrate
from outbox_relay.stack.paths import StackPaths
from tests.faults.conftest import PrivateStack, Scenario
from tests.faults.infra import create_topics, database_url, query, unique
from tests.faults.oracle import ledger_entries, read_all
from tests.faults.outbox_writer import Msg, Outbox
from tests.faults.poison import (
    PARK_RULE,
    Case,
    check,
    expectations,
    mixed_traffic,
    run_until_settled,
)
from tests.faults.recorders import install_recorders, quiesce
from tests.faults.relay_proc import relay_config, relays, start_relay

pytestmark = [pytest.mark.faults, pytest.mark.integration]

HOSTILE_NAMES = ("it's \"quoted\"", "x;DROP TABLE kafka_messages;--", "tópico-ü-日本")
HEADER_POISON: dict[str, tuple[Any, Any]] = {
    # what -> the poison headers at a third and at two thirds of the topic's traffic
    "reserved header": ({"outbox-relay.id": "1"}, {"outbox-relay.source": "forged"}),
    "non-string header": ({"n": 1}, {"nested": {"a": "b"}, "ok": "yes"}),
    "headers not an object": (["a", "b"], "just a string"),
}
GOOD_HEADERS = {"tenant": "ünï", "note": "it's \"fine\"; DROP TABLE x; --"}


def _poison(case: Case, n: int) -> Msg:
    headers = HEADER_POISON[case.what][n]
    return Msg(case.topic, b"k2" if n == 0 else b"k4", f"poison {n}".encode(), headers=headers)


def _password_role(stack: PrivateStack) -> tuple[str, str]:
    """A role that must log in with a password, and a database it owns: (url, password)."""
    role = f"fault_pw_{uuid.uuid4().hex[:8]}"
    password = f"S3cr3t-{uuid.uuid4().hex[:12]}'\";%@:/ü"
    name = f"f_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(stack.info.postgres_url)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE ROLE {role} LOGIN PASSWORD %s", (password,))
            cur.execute(f'CREATE DATABASE "{name}" OWNER {role}')
            # Password authentication for this role only; everyone else keeps trust.
            hba = StackPaths.resolve(stack.dir).pg_data / "pg_hba.conf"
            hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
            cur.execute("SELECT pg_reload_conf()")
    finally:
        admin.close()
    base = database_url(stack.info.postgres_url, name)
    url = base.replace("postgresql://postgres@", f"postgresql://{role}@", 1)
    return url, password


def _connects(url: str, password: str | None) -> bool:
    try:
        psycopg2.connect(url, password=password, connect_timeout=10).close()
    except psycopg2.OperationalError:
        return False
    return True


def _leaks(roots: list[Path], secrets: list[str]) -> list[str]:
    needles = {s.encode() for s in secrets} | {s.encode("latin-1", "ignore") for s in secrets}
    found = []
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if not path.is_file():
                continue
            data = path.read_bytes()
            found += [f"{path.name}" for n in needles if n and n in data]
    return found


@pytest.mark.scenario("8-bad-input-and-security")
def test_hostile_topics_and_headers_are_handled_by_policy_and_no_password_is_logged(
    private_stack: PrivateStack, tmp_path: Path, spark: SparkSession, scenario: Scenario,
    long_mode: bool,
) -> None:
    info = private_stack.ensure_up()
    url, password = _password_role(private_stack)
    assert not _connects(url, None), "the role must need its password"
    assert _connects(url, password)
    env = {"RELAY_POSTGRES_PASSWORD": password}

    healthy = [unique("plain")]
    cases = [Case(f"f{p}-{name}-{uuid.uuid4().hex[:6]}", p, whole_topic=True, what=name)
             for name in HOSTILE_NAMES for p in ("park", "block")]
    cases += [Case(unique(f"f{p}-hdr"), p, what=what) for what in HEADER_POISON
              for p in ("park", "block")]
    create_topics(info.kafka_bootstrap, dict.fromkeys(healthy, 2))
    create_topics(info.kafka_bootstrap, {c.topic: 1 for c in cases if not c.whole_topic})

    config = relay_config(url, info.kafka_bootstrap, tmp_path, source_name="fault-hostile",
                          relay={"batch_size": 100, "topic_rules": [PARK_RULE]})
    config_env = config.model_copy(update={"postgres": config.postgres.model_copy(
        update={"password": SecretStr(password)})})
    db = Database(config_env.postgres)
    try:
        migrate(db)
    finally:
        db.close()
    install_recorders(_with_password(url, password))

    outbox = Outbox(_with_password(url, password))
    per_topic = 400 if long_mode else 60
    mixed_traffic(outbox, healthy, cases, _poison, per_topic=per_topic, keys=6, seed=8)
    good = outbox.write([[Msg(healthy[0], b"h", b"with headers", headers=GOOD_HEADERS)]])
    outbox.close()
    exp = expectations(outbox, healthy, cases)
    quoted = _with_password(url, password)

    with relays() as procs:
        # A wrong password first: a clear error, and neither password in its output.
        wrong = start_relay(config, tmp_path, "wrong-password", available_now=True,
                            env={"RELAY_POSTGRES_PASSWORD": password[::-1]})
        procs.append(wrong)
        wrong_code = wrong.wait(600)
        proc = start_relay(config, tmp_path, "relay", env=env)
        procs.append(proc)
        started = time.monotonic()
        run_until_settled(quoted, exp, proc)
        drain_s = time.monotonic() - started
        quiesce(quoted)
        code = proc.stop()
        log = proc.text()
    records = read_all(info.kafka_bootstrap, [*healthy, *(c.topic for c in cases
                                                          if not c.whole_topic)])
    result = check(quoted, outbox, records, cases, exp, "fault-hostile",
                   ledger_entries(spark, config_env), config.relay.batch_size)
    with_headers = [r for r in records if r.outbox_id == good[0]]
    tables = {t for (t,) in query(quoted, "SELECT tablename FROM pg_tables "
                                  "WHERE schemaname = 'public'")}
    reasons = dict(query(quoted, "SELECT id, reason FROM relay_parked_messages"))
    header_reasons = {reasons[c.poison[0]] for c in cases if c.policy == "park" and c.poison}
    wrong_lines = [ln for ln in wrong.text().splitlines() if ln.startswith("outbox-relay:")]
    secrets = [password, password[::-1], urllib.parse.quote(password),
               urllib.parse.quote(password[::-1])]
    pg_logs = [StackPaths.resolve(private_stack.dir).pg_log]
    leaks = _leaks([tmp_path, *pg_logs], secrets)
    scenario.update(
        result.figures,
        faults_injected=sum(len(c.poison) or 1 for c in cases) + 1,
        drain_s=round(drain_s, 1),
        hostile_topics=len(HOSTILE_NAMES) * 2,
        header_cases=len(HEADER_POISON) * 2,
        password_leaks=len(leaks),
        wrong_password_exit=wrong_code,
        notes=f"{len(HOSTILE_NAMES) * 2} hostile topic names and "
              f"{sum(len(c.poison) for c in cases)} bad headers handled by policy; relay "
              f"logged in with a scram password; {len(leaks)} password leaks in "
              "logs, profiles, checkpoints, ledger and server log; wrong password: exit "
              f"{wrong_code}",
    )

    assert code == 0, log[-3000:]
    assert not result.problems, "\n".join(result.problems)
    assert "kafka_messages" in tables, "the hostile topic names were data, not SQL"
    assert all(r for r in header_reasons) and all(
        "header" in r for r in header_reasons), header_reasons
    assert len(with_headers) == 1
    assert {k: v.decode() for k, v in with_headers[0].headers.items()
            if not k.startswith("outbox-relay.")} == GOOD_HEADERS
    assert wrong_code == 4, wrong.tail()
    assert wrong_lines and "PostgreSQL" in wrong_lines[-1], wrong.tail()
    assert not leaks, f"the password appears in {leaks}"


def _with_password(url: str, password: str) -> str:
    """A libpq URL with the password, for the test's own connections only."""
    parts = urllib.parse.urlsplit(url)
    user = parts.username or "postgres"
    netloc = f"{user}:{urllib.parse.quote(password, safe='')}@{parts.hostname}:{parts.port}"
    return parts._replace(netloc=netloc).geturl()

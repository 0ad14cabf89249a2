"""`outbox-relay metrics serve`, scraped over HTTP and checked against the database."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.exit_codes import ExitCode
from outbox_relay.observe import OTHER_TOPICS
from outbox_relay.observe.collector import StatusCollector
from outbox_relay.stack import StackInfo
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import Msg, insert, query, unique, wait_for
from tests.integration.many import (
    ADD,
    CATALOG_QUERY,
    REMOVE,
    TENANTS,
    Databases,
    migrate_url,
    profile_data,
)
from tests.integration.process import REPO, write_profile, write_raw_profile

pytestmark = pytest.mark.integration

TOPICS, TOP = 30, 10


@pytest.fixture
def server(make_config: ConfigFactory, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The outbox's URL and the serving process's /metrics address."""
    config = make_config()
    url = config.postgres.url
    prefix = unique("mx")
    # Topic i holds i + 1 rows: the ten largest backlogs are the last ten, and the ten
    # topics that keep a label are the first ten by name.
    insert(url, [[Msg(f"{prefix}.{i:02d}", b"k", b"v") for _ in range(i + 1)]
                 for i in range(TOPICS)])
    query(url, "INSERT INTO kafka_topic_info (topic, error, retries, last_error, locked_at, "
               "next_retry_at) VALUES (%s, true, 4, 'refused', now() AT TIME ZONE 'UTC', "
               "now() AT TIME ZONE 'UTC' + interval '5 minutes')", (f"{prefix}.13",))
    query(url, "INSERT INTO relay_parked_messages (id, topic, message, created_at, reason, "
               "source) VALUES (900000001, %s, 'v', now() AT TIME ZONE 'UTC', 'too large', "
               "'t'), (900000002, %s, 'v', now() AT TIME ZONE 'UTC', 'too large', 't')",
          (f"{prefix}.11", f"{prefix}.11"))
    query(url, "INSERT INTO relay_ledger_staging (session_id, topic, outcome, ids, source) "
               "VALUES (gen_random_uuid(), %s, 'published', '{1,2}', 't'), "
               "(gen_random_uuid(), %s, 'parked', '{3}', 't')",
          (f"{prefix}.00", f"{prefix}.00"))
    profile = write_profile(config, tmp_path / "profile.toml")
    with _serving(profile, "--top-topics", str(TOP)) as address:
        yield url, address


@contextmanager
def _serving(profile: Path, *options: str) -> Iterator[str]:
    """`metrics serve` of `profile` in a process of its own: its /metrics address."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen(
        [sys.executable, "-m", "outbox_relay.cli", "--config", str(profile), "metrics", "serve",
         "--port", "0", *options],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("serving http://127.0.0.1:"), (line, proc.stderr)
        yield line.removeprefix("serving ")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == ExitCode.OK


def _closed_port() -> int:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _scrape(address: str) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    with urllib.request.urlopen(address, timeout=10) as response:
        text = response.read().decode("utf-8")
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return text, values


def test_a_scrape_matches_the_database_with_the_topic_labels_capped(
    server: tuple[str, str],
) -> None:
    url, address = server
    text, values = _scrape(address)
    counts = dict(query(url, "SELECT topic, count(*) FROM kafka_messages GROUP BY 1"))
    ages = dict(query(url, "SELECT DISTINCT ON (topic) topic, extract(epoch FROM "
                           "now() AT TIME ZONE 'UTC' - created_at)::float "
                           "FROM kafka_messages ORDER BY topic, id"))
    by_name = sorted(counts)
    kept, rest = by_name[:TOP], by_name[TOP:]

    def metric(name: str, **labels: str) -> float:
        return values[(f"outbox_relay_{name}", tuple(sorted(labels.items())))]

    assert metric("database_up") == 1
    labels = {dict(k[1])["topic"] for k in values if k[0] == "outbox_relay_backlog_messages"}
    assert labels == {*kept, OTHER_TOPICS}
    for topic in kept:
        assert metric("backlog_messages", topic=topic) == counts[topic]
        assert metric("topic_state", topic=topic, state="ready") == 1
        assert metric("oldest_message_age_seconds", topic=topic) == pytest.approx(
            ages[topic], abs=5)
    assert metric("backlog_messages", topic=OTHER_TOPICS) == sum(counts[t] for t in rest)
    assert metric("oldest_message_age_seconds", topic=OTHER_TOPICS) == pytest.approx(
        max(ages[t] for t in rest), abs=5)
    assert metric("topic_state", topic=OTHER_TOPICS, state="backoff") == 1
    assert metric("topic_state", topic=OTHER_TOPICS, state="ready") == len(rest) - 1
    assert metric("topic_retries", topic=OTHER_TOPICS) == 4
    assert metric("parked_messages", topic=OTHER_TOPICS) == 2
    assert metric("topics", state="backoff") == 1
    staged = query(url, "SELECT count(*) FROM relay_ledger_staging")[0][0]
    assert metric("ledger_staged_records") == staged == 2
    assert metric("ledger_staged_messages") == 3
    dead = query(url, "SELECT n_dead_tup FROM pg_stat_user_tables "
                      "WHERE relid = 'kafka_messages'::regclass")[0][0]
    assert metric("queue_dead_tuples") == dead
    assert "postgresql://" not in text and "password" not in text.lower()


def test_an_unreachable_database_is_a_scrape_that_says_so() -> None:
    config = build_config({"postgres": {"url": f"postgresql://u@127.0.0.1:{_closed_port()}/x",
                                        "connect_timeout_s": 2}},
                          env={"RELAY_POSTGRES_PASSWORD": "s3cret-pw"})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(Database(config.postgres), 60.0, "ledger"))
    text = generate_latest(registry).decode("utf-8")
    assert "outbox_relay_database_up 0.0" in text
    assert "s3cret-pw" not in text and "outbox_relay_backlog_messages" not in text


def test_the_topic_labels_stay_put_when_the_backlogs_change(server: tuple[str, str]) -> None:
    """The cap once kept the ten largest backlogs: a topic that grew took a label from
    another on the next scrape, and both series broke off. The first ten keep theirs."""
    url, address = server

    def labelled() -> set[str]:
        _, values = _scrape(address)
        return {dict(k[1])["topic"] for k in values if k[0] == "outbox_relay_backlog_messages"}

    before = labelled()
    topics = set(dict(query(url, "SELECT topic, count(*) FROM kafka_messages GROUP BY 1")))
    # A topic folded into `other` grows past every other backlog.
    grown = sorted(topics - before)[0]
    insert(url, [[Msg(grown, b"k", b"v") for _ in range(200)]])
    assert labelled() == before


def test_a_profile_of_several_is_one_scrape_that_labels_each_database(
    stack: StackInfo, databases: Databases, tmp_path: Path,
) -> None:
    """The exporter of a profile of several databases (docs/many-databases.md): each
    database's series under its `database` label, one it cannot reach as down."""
    entries = databases(2)
    topic = unique("mx.many")
    for n, (_, url) in enumerate(entries, 1):
        migrate_url(url)
        insert(url, [[Msg(topic, b"k", b"v") for _ in range(n)]])
    down = ("down", f"postgresql://u@127.0.0.1:{_closed_port()}/x")
    data = profile_data(stack, tmp_path, [*entries, down], [topic])
    data["postgres"]["connect_timeout_s"] = 2
    with _serving(write_raw_profile(data, tmp_path / "many.toml")) as address:
        text, values = _scrape(address)

    def metric(name: str, **labels: str) -> float | None:
        return values.get((f"outbox_relay_{name}", tuple(sorted(labels.items()))))

    for n, (name, _) in enumerate(entries, 1):
        assert metric("database_up", database=name) == 1, text
        assert metric("backlog_messages", database=name, topic=topic) == n, text
    assert metric("database_up", database="down") == 0, text
    assert not [k for k in values if dict(k[1]).get("database") == "down"
                and k[0] != "outbox_relay_database_up"], text
    assert "postgresql://" not in text


def test_the_exporter_of_a_catalog_shows_a_database_added_and_drops_one_removed(
    stack: StackInfo, databases: Databases, tmp_path: Path,
) -> None:
    """The catalog is read again every databases_refresh_s, as the relay reads it: an
    exporter started before a tenant was added serves it, and one removed goes."""
    [(_, catalog_url), (first, first_url), (second, second_url)] = databases(3)
    topic = unique("mx.catalog")
    for n, url in enumerate((first_url, second_url), 1):
        migrate_url(url)
        insert(url, [[Msg(topic, b"k", b"v") for _ in range(n)]])
    query(catalog_url, TENANTS)
    query(catalog_url, ADD, (first, first_url))
    data = profile_data(stack, tmp_path, [], [topic])
    del data["databases"]
    data["catalog"] = {"url": catalog_url, "databases_refresh_s": 1.0, "query": CATALOG_QUERY}

    def served(address: str) -> dict[str, float]:
        _, values = _scrape(address)
        return {dict(labels)["database"]: value for (name, labels), value in values.items()
                if name == "outbox_relay_backlog_messages" and dict(labels)["topic"] == topic}

    with _serving(write_raw_profile(data, tmp_path / "catalog.toml")) as address:
        assert served(address) == {first: 1}
        query(catalog_url, ADD, (second, second_url))
        assert wait_for(lambda: served(address) == {first: 1, second: 2}, 20, 0.2), \
            served(address)
        query(catalog_url, REMOVE, (first,))
        assert wait_for(lambda: served(address) == {second: 2}, 20, 0.2), served(address)

"""The operator notebook, run as a plain script after real relay drains: its JSON files
must say what the database says, read here independently, and its PNGs must be images.

The outbox holds every kind of topic the figures show: one drained in two runs (its
ledger records partly in Delta, partly still staged: the second run could not copy),
one with messages parked under the `park` policy (two oversized, one overtaken by its
key's earlier parked message), one the broker does not know (in backoff), and one with
rows still waiting, written a while ago.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from PIL import Image

from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_LEFT_OVER
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import Msg, create_topics, insert, query, unique
from tests.integration.process import REPO, write_profile

pytestmark = pytest.mark.integration

NOTEBOOK = REPO / "notebooks" / "outbox_health.py"
FIGURES = ("backlog", "oldest_age", "states", "throughput", "parked")
LIMIT = 10_000
WAITING_AGE_S = 120
MAX_AGE_S = 60
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _mixed(topic: str, n: int, tag: str) -> list[list[Msg]]:
    """Every key shape: partition_key NULL, equal to the key, different; binary and NULL
    keys; empty and NULL values."""
    shapes = [
        lambda i: Msg(topic, f"k{i % 3}".encode(), f"{tag}{i}".encode()),
        lambda i: Msg(topic, b"same", b"", partition_key="same"),
        lambda i: Msg(topic, bytes([0, 255, i % 7]), None, partition_key=f"p{i % 2}"),
        lambda i: Msg(topic, None, f"{tag}{i}".encode()),
        lambda i: Msg(topic, bytes([i % 5, 0]), f"{tag}{i}".encode()),
    ]
    return [[shapes[i % len(shapes)](i) for i in range(j, min(j + 4, n))]
            for j in range(0, n, 4)]


def _parking(topic: str) -> list[list[Msg]]:
    big = b"x" * (2 * LIMIT)
    return [[Msg(topic, b"k1", b"a")], [Msg(topic, b"k1", big)], [Msg(topic, b"k1", b"b")],
            [Msg(topic, b"k2", big[: int(1.5 * LIMIT)])], [Msg(topic, None, b"c")]]


def _run_notebook(profile: Path, out: Path, message_id: int) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(RELAY_CONFIG=str(profile), RELAY_NOTEBOOK_OUT=str(out),
               RELAY_NOTEBOOK_MAX_AGE_S=str(MAX_AGE_S),
               RELAY_NOTEBOOK_MESSAGE_ID=str(message_id), PYTHONPATH=str(REPO),
               MPLBACKEND="Agg")
    done = subprocess.run([sys.executable, str(NOTEBOOK)], cwd=out.parent, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _load(out: Path, name: str) -> Any:
    return json.loads((out / f"{name}.json").read_text(encoding="utf-8"))


def test_notebook_figures_match_the_database(
    stack: StackInfo, make_config: ConfigFactory, migrated_url: str, run_relay: RelayRunner,
    tmp_path: Path,
) -> None:
    t = {k: unique(f"nb-{k}") for k in ("drained", "park", "missing", "waiting")}
    create_topics(stack.kafka_bootstrap, {t["drained"]: 2, t["waiting"]: 1})
    create_topics(stack.kafka_bootstrap, {t["park"]: 1}, **{"max.message.bytes": str(LIMIT)})
    include = [t["drained"], t["park"], t["missing"]]
    rules = [{"match": re.escape(t["park"]), "policy": "park"}]
    slow_backoff = {"backoff_base_s": 300, "backoff_max_s": 600, "topic_rules": rules}
    ids = {k: insert(migrated_url, txs) for k, txs in (
        ("drained", _mixed(t["drained"], 30, "a")), ("park", _parking(t["park"])),
        ("missing", [[Msg(t["missing"], b"k", b"v")] for _ in range(3)]))}
    config = make_config(include, relay=slow_backoff)
    assert run_relay(config).exit_code == EXIT_LEFT_OVER  # the missing topic is left
    # A second drain that can't copy its ledger records to Delta: they stay staged.
    ids["drained"] += insert(migrated_url, _mixed(t["drained"], 17, "b"))
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    blocked = make_config(include, name="blocked", relay=slow_backoff,
                          ledger={"path": str(blocker / "ledger")})
    assert run_relay(blocked).exit_code == EXIT_LEFT_OVER
    ids["waiting"] = insert(migrated_url, _mixed(t["waiting"], 9, "w"))
    query(migrated_url, "UPDATE kafka_messages SET created_at = created_at - "
          "make_interval(secs => %s) WHERE topic = %s", (WAITING_AGE_S, t["waiting"]))
    # The drained topic's ledger: the first run's 30 records in Delta, the second's staged.
    in_delta = Counter(DeltaTable(config.ledger.path).to_pyarrow_table(
        columns=["topic"]).column("topic").to_pylist())
    assert in_delta[t["drained"]] == 30
    assert query(migrated_url, "SELECT sum(cardinality(ids)) FROM relay_ledger_staging "
                 "WHERE topic = %s", (t["drained"],))[0][0] == 17
    oversized = ids["park"][1]

    out = tmp_path / "figures"
    stdout = _run_notebook(write_profile(config, tmp_path / "profile.toml"), out, oversized)

    waiting = dict(query(migrated_url, "SELECT topic, count(*) FROM kafka_messages GROUP BY 1"))
    assert waiting == {t["missing"]: 3, t["waiting"]: 9}
    backlog = _load(out, "backlog")
    assert {r["topic"]: r["backlog"] for r in backlog["topics"]} == waiting
    assert all(r["exact"] for r in backlog["topics"]) and backlog["other"] is None
    assert backlog["total"] == sum(waiting.values())

    ages = _load(out, "oldest_age")
    now = datetime.fromisoformat(ages["generated_at"]).replace(tzinfo=None)
    oldest = dict(query(migrated_url, "SELECT DISTINCT ON (topic) topic, created_at "
                        "FROM kafka_messages ORDER BY topic, id"))
    shown = {r["topic"]: r for r in ages["topics"]}
    assert set(shown) == set(waiting)
    for topic, created in oldest.items():
        assert shown[topic]["oldest_age_s"] == pytest.approx(
            (now - created).total_seconds(), abs=0.01)
        assert shown[topic]["over"] == ((now - created).total_seconds() > MAX_AGE_S)
    assert shown[t["waiting"]]["oldest_age_s"] >= WAITING_AGE_S and shown[t["waiting"]]["over"]
    assert ages["threshold_s"] == MAX_AGE_S

    states = _load(out, "states")
    rows = {r["topic"]: r for r in states["rows"]}
    info = {r[0]: r[1:] for r in query(
        migrated_url, "SELECT topic, error, retries, last_error FROM kafka_topic_info")}
    error, retries, last_error = info[t["missing"]]
    assert error and retries >= 1 and last_error
    assert (rows[t["missing"]]["state"], rows[t["missing"]]["retries"],
            rows[t["missing"]]["last_error"]) == ("backoff", retries, last_error)
    assert states["rows"][0]["topic"] == t["missing"], "backoff comes first"
    for name in (t["drained"], t["park"], t["waiting"]):
        assert (rows[name]["state"], rows[name]["last_error"]) == ("ready", None)
    assert states["counts"] == {"ready": 3, "locked": 0, "backoff": 1}

    reasons = [r for (r,) in query(migrated_url, "SELECT reason FROM relay_parked_messages")]
    by_reason = Counter(re.sub(r"[0-9]+", "N", r) for r in reasons)
    parked = _load(out, "parked")
    assert {r["reason"]: r["messages"] for r in parked["reasons"]} == dict(by_reason)
    assert parked["total"] == len(reasons) == 3 and len(by_reason) == 2

    rates = _load(out, "throughput")
    assert rates["delta_read"] and rates["delta_error"] is None
    # Published: every message that left the outbox, except the parked ones.
    parked_per_topic = dict(query(migrated_url, "SELECT topic, count(*) FROM "
                                  "relay_parked_messages GROUP BY 1"))
    published = {t[k]: len(v) - waiting.get(t[k], 0) - parked_per_topic.get(t[k], 0)
                 for k, v in ids.items()}
    assert rates["totals"] == {k: v for k, v in published.items() if v}
    assert rates["totals"] == {t["drained"]: 47, t["park"]: 2}
    for s in rates["series"]:
        assert sum(s["per_minute"].values()) == s["total"] == rates["totals"][s["topic"]]

    lookup = _load(out, "lookup")
    assert [r["topic"] for r in lookup["parked"]] == [t["park"]] and not lookup["waiting"]
    ledger_rows = lookup["staging"] + lookup["delta"]
    assert {(r["outcome"], r["partition"]) for r in ledger_rows} == {
        ("parked", "not sent to Kafka")}
    assert f"message {oversized}: parked" in stdout

    for name in FIGURES:
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_SIGNATURE, name
        with Image.open(png) as image:
            image.verify()
        with Image.open(png) as image:
            assert image.format == "PNG" and min(image.size) >= 200, (name, image.size)

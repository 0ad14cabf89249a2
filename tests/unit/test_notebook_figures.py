"""The notebook's figure data (outbox_relay.observe.health) and its drawings
(outbox_relay.observe.plots): top N plus `other` at 1,000 topics, nothing lost in the fold, readable
images at 0 and 1,000 topics, and the notebook file in Databricks' source format."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from outbox_relay.observe import health, plots, queries
from outbox_relay.observe.ledger_rates import counts_here
from outbox_relay.observe.status import Lock, TopicError
from outbox_relay.observe.throughput import PerMinute
from tests.unit.test_status_pure import NOW, snapshot, topic

REPO = Path(__file__).resolve().parents[2]
FIRST = int(NOW.timestamp() // 60) - 1439


def many(n: int) -> list[Any]:
    """n topics of every state; every seventh backlog estimated, every 50th in backoff."""
    out = []
    for i in range(n):
        state = "backoff" if i % 50 == 0 else "locked" if i % 50 == 1 else "ready"
        out.append(topic(
            f"t{i:04d}", backlog=(i * 37) % 1000, age=float((i * 13) % 900) if i % 3 else None,
            state=state, exact=i % 7 != 0, retries=3 if state == "backoff" else 0,
            lock=Lock("relay-a:tok", NOW, i % 2 == 0) if state == "locked" else None,
            error=(TopicError(f"broker said no {i}", NOW + timedelta(seconds=30), 30.0)
                   if state == "backoff" else None)))
    return out


def series(n: int) -> PerMinute:
    counts = {f"t{i:04d}": {FIRST + (i * 7) % 1440: i + 1, FIRST + 1439: 2} for i in range(n)}
    return PerMinute(generated_at=NOW, first_minute=FIRST, minutes=1440, counts=counts,
                     delta_read=True)


def reasons(n: int) -> list[dict[str, Any]]:
    return [{"reason": f"message N is N bytes, over the limit of N (kind {i})",
             "messages": n - i, "topics": 1, "example": f"message 4{i} is 12 bytes",
             "last_parked_at": NOW} for i in range(n)]


def test_backlog_keeps_the_largest_and_folds_the_rest_into_other() -> None:
    topics = many(1000)
    data = health.backlog(snapshot(*topics))
    waiting = [t for t in topics if t.backlog]
    assert len(data["topics"]) == health.TOP_BARS
    assert [r["backlog"] for r in data["topics"]] == sorted(
        (t.backlog for t in waiting), reverse=True)[: health.TOP_BARS]
    assert data["other"]["topics"] == len(waiting) - health.TOP_BARS
    assert sum(r["backlog"] for r in data["topics"]) + data["other"]["backlog"] == data[
        "total"] == sum(t.backlog for t in waiting)
    estimated = {t.topic for t in topics if not t.backlog_exact}
    assert all(r["exact"] == (r["topic"] not in estimated) for r in data["topics"])
    assert data["other"]["exact"] is False


def test_oldest_age_marks_what_crosses_the_threshold() -> None:
    data = health.oldest_age(snapshot(topic("a", 5, age=30.0), topic("b", 1, age=700.0),
                                      topic("idle")), max_age_s=600)
    assert [(r["topic"], r["over"]) for r in data["topics"]] == [("b", True), ("a", False)]
    assert (data["over_threshold"], data["threshold_s"], data["other"]) == (1, 600, None)
    folded = health.oldest_age(snapshot(*many(1000)), max_age_s=600, top=5)
    assert folded["other"]["oldest_age_s"] <= folded["topics"][-1]["oldest_age_s"]
    assert folded["over_threshold"] == sum(r["over"] for r in folded["topics"]) + folded[
        "other"]["over"]
    assert health.oldest_age(snapshot(*many(10)), max_age_s=None)["over_threshold"] == 0


def test_states_put_backoff_first_and_keep_the_error() -> None:
    data = health.states(snapshot(*many(1000)))
    assert data["counts"] == {"ready": 960, "locked": 20, "backoff": 20}
    assert [r["state"] for r in data["rows"][:20]] == ["backoff"] * 20
    assert data["rows"][0]["last_error"].startswith("broker said no")
    assert data["rows"][20]["state"] == "locked" and data["rows"][20]["locked_by"]
    assert data["more"] == 1000 - health.TOP_ROWS


def test_throughput_keeps_the_busiest_and_sums_the_rest_minute_by_minute() -> None:
    s = series(1000)
    data = health.throughput(s)
    assert [x["topic"] for x in data["series"]] == [f"t{i:04d}" for i in range(999, 989, -1)]
    everything = sum(sum(m.values()) for m in s.counts.values())
    shown = sum(x["total"] for x in data["series"])
    assert data["other"]["total"] + shown == everything == sum(data["totals"].values())
    assert sum(data["other"]["per_minute"].values()) == data["other"]["total"]
    last = data["last_minute"]
    assert data["other"]["per_minute"][last] == 2 * 990
    assert data["first_minute"] < last and data["minutes"] == 1440


def test_parked_folds_rare_reasons() -> None:
    data = health.parked(reasons(15), NOW)
    assert len(data["reasons"]) == health.TOP_REASONS
    assert data["other"] == {"reasons": 5, "messages": sum(range(1, 6))}
    assert data["total"] == sum(range(1, 16))


def test_lookup_says_where_the_message_is() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5)
    found = {"message_id": 7, "waiting": [], "parked": [],
             "staging": [{"topic": "t", "outcome": "published", "session_id": "s",
                          "source": "relay-x", "relayed_at": at.replace(tzinfo=UTC),
                          "actor": None, "partition": "partition 2 of 3"}],
             "delta": [{"topic": "t", "outcome": "skipped", "session_id": "s2",
                        "source": "outbox-relay skip", "relayed_at": at, "actor": "bob@ops",
                        "partition": "not sent to Kafka"}],
             "delta_error": None}
    data = health.lookup(found)
    assert data["summary"] == (
        "message 7: published to topic 't' at 2026-01-02T03:04:05Z by relay-x, "
        "partition 2 of 3 (ledger, staging); skipped to topic 't' at 2026-01-02T03:04:05Z "
        "by bob@ops, not sent to Kafka (ledger, delta)")
    json.dumps(data)
    nothing = health.lookup({**found, "staging": [], "delta": []})
    assert nothing["summary"].startswith("message 7: not found")


@pytest.mark.parametrize(("row_origin", "batch", "counts"), [
    ("me", 1, True), ("me", 9, False), (None, 9, True), ("other", 1, False)])
def test_a_delta_row_counts_once_and_only_for_its_outbox(
    row_origin: str | None, batch: int, counts: bool
) -> None:
    assert counts_here(row_origin, batch, "me", {9}) is counts


@pytest.mark.parametrize("n", [0, 1, 1000])
def test_every_figure_renders_readably(n: int, tmp_path: Path) -> None:
    snap = snapshot(*many(n))
    figures = {
        "backlog": (plots.backlog, health.backlog(snap)),
        "oldest_age": (plots.oldest_age, health.oldest_age(snap, 300)),
        "states": (plots.states, health.states(snap)),
        "throughput": (plots.throughput, health.throughput(series(n))),
        "parked": (plots.parked, health.parked(reasons(min(n, 40)), NOW)),
    }
    for name, (draw, data) in figures.items():
        png = plots.save(draw(data), data, tmp_path, name)
        with Image.open(png) as image:
            width, height = image.size
        assert 300 <= width <= 1600 and 150 <= height <= 1400, (name, n, image.size)
        assert json.loads((tmp_path / f"{name}.json").read_text()) == json.loads(
            json.dumps(data, default=str))


def test_the_notebook_is_in_databricks_source_format() -> None:
    text = (REPO / "notebooks" / "outbox_health.py").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == "# Databricks notebook source"
    cells = text.split("\n# COMMAND ----------\n")
    assert len(cells) >= 8
    markdown = [c for c in cells if c.strip().startswith("# MAGIC %md")]
    assert markdown and all(
        all(line.startswith("# MAGIC") for line in c.strip().splitlines()) for c in markdown)
    assert not re.search(r"^\s*(import|from)\s+pyspark", text, re.M), "no Spark needed"


def test_the_series_counts_the_records_the_rates_count() -> None:
    for statement in (queries.STAGED, queries.DELTA_RATES, queries.STAGED_PER_MINUTE,
                      queries.DELTA_PER_MINUTE):
        assert statement.count(queries.RATED_RECORDS) == (
            2 if statement is queries.STAGED else 1), statement

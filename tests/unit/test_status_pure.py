"""The pure parts of `status` and its metrics: the count budget and the estimate, the
thresholds, the JSON and table output, and the label cap."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from outbox_relay.config import MetricsConfig
from outbox_relay.observe import OTHER_TOPICS as OTHER
from outbox_relay.observe.backlog import MIN_SHARE, Span, backlog_of, count_limits
from outbox_relay.observe.collector import capped, families
from outbox_relay.observe.labels import TopicLabels
from outbox_relay.observe.ledger_rates import DeltaCounts, delta_counts
from outbox_relay.observe.report import Thresholds, parse_fail_on, problems, table, to_json
from outbox_relay.observe.runtime import RuntimeMetrics
from outbox_relay.observe.status import (
    STATES,
    LedgerStatus,
    Lock,
    Snapshot,
    TopicError,
    TopicLedger,
    TopicStatus,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def topic(name: str, backlog: int = 0, *, state: str = "ready", age: float | None = None,
          parked: int = 0, retries: int = 0, exact: bool = True, lock: Lock | None = None,
          error: TopicError | None = None) -> TopicStatus:
    return TopicStatus(
        topic=name, state=state, backlog=backlog, backlog_exact=exact,
        oldest_id=1 if backlog else None,
        oldest_created_at=NOW - timedelta(seconds=age) if age is not None else None,
        oldest_age_s=age, max_wait_s=age or 0.0, last_processed_at=None, lock=lock,
        retries=retries, error=error, parked=parked, ledger=TopicLedger(),
    )


def snapshot(*topics: TopicStatus) -> Snapshot:
    ledger = LedgerStatus(path="ledger", delta_read=True, delta_exists=True, delta_version=3,
                          delta_error=None, staged_records=2, staged_messages=5,
                          oldest_staged_at=NOW, oldest_staged_age_s=1.5)
    return Snapshot(generated_at=NOW, lock_timeout_s=60.0, topics=list(topics), ledger=ledger,
                    horizon=None, queue_table=None)


def test_counts_fit_the_budget_and_small_topics_keep_what_they_need() -> None:
    spans = {"small": Span(10, 14), "big": Span(1, 10_000_000), "huge": Span(5, 90_000_000)}
    assert count_limits(spans, exact_up_to=1000, budget=10_000) == {
        "small": 5, "big": 1000, "huge": 1000}
    limits = count_limits(spans, exact_up_to=100_000, budget=10_005)
    assert limits == {"small": 5, "big": 5000, "huge": 5000}
    assert sum(limits.values()) <= 10_005


def test_a_share_never_falls_below_the_floor() -> None:
    spans = {f"t{i}": Span(1, 10**9) for i in range(1000)}
    assert set(count_limits(spans, budget=1000).values()) == {MIN_SHARE}


def test_a_topic_counted_below_its_limit_is_exact() -> None:
    assert backlog_of(Span(1, 500), limit=100, counted=42, last_id=500).messages == 42
    assert backlog_of(Span(1, 500), limit=100, counted=100, last_id=500).exact


@pytest.mark.parametrize(("every", "rows"), [(1, 1000), (7, 5000), (1000, 300)])
def test_an_evenly_spread_topic_is_estimated_exactly_and_marked(every: int, rows: int) -> None:
    ids = [5 + every * k for k in range(rows)]
    limit = 50
    got = backlog_of(Span(ids[0], ids[-1]), limit, counted=limit + 1, last_id=ids[limit])
    assert (got.messages, got.exact) == (rows, False)


def test_an_estimate_is_never_below_the_rows_counted() -> None:
    # A burst: the first rows are spread wide, the rest (unseen) packed: under-estimated.
    got = backlog_of(Span(1, 1000), limit=10, counted=11, last_id=1000)
    assert (got.messages, got.exact) == (11, False)


def test_fail_on_is_validated() -> None:
    assert parse_fail_on("backoff,parked") == {"backoff", "parked"}
    assert parse_fail_on(" parked ") == {"parked"}
    for bad in ("", "backoff,", "locked", "Backoff"):
        with pytest.raises(ValueError, match="choose from backoff, parked"):
            parse_fail_on(bad)


def test_problems_name_each_topic_over_a_threshold() -> None:
    err = TopicError("broker said no", NOW + timedelta(seconds=30), 30.0)
    snap = snapshot(topic("old", 5, age=120.0), topic("young", 5, age=10.0),
                    topic("stuck", 2, state="backoff", age=5.0, retries=3, error=err),
                    topic("dlq", parked=4))
    assert problems(snap, Thresholds()) == []
    found = problems(snap, Thresholds(max_age_s=60, fail_on=frozenset({"backoff", "parked"})))
    assert len(found) == 3
    assert "'old'" in found[0] and "120 s" in found[0]
    assert "'stuck'" in found[1] and "3 retries" in found[1] and "broker said no" in found[1]
    assert "'dlq'" in found[2] and "4 parked" in found[2]


def test_json_has_stable_names_and_utc_iso_times() -> None:
    lock = Lock("relay-a:token", NOW.replace(tzinfo=None).replace(tzinfo=UTC), alive=False)
    data = to_json(snapshot(topic("a", 3, state="locked", age=1.0, lock=lock)), Thresholds())
    json.dumps(data)  # every value is plain JSON
    assert data["generated_at"] == "2026-01-02T03:04:05.678901Z"
    t = data["topics"][0]
    assert t["lock"] == {"by": "relay-a:token", "since": "2026-01-02T03:04:05.678901Z",
                         "alive": False, "holder_gone": False}
    assert set(t) >= {"topic", "state", "backlog", "backlog_exact", "oldest_age_s",
                      "max_wait_s", "retries", "error", "parked", "ledger"}
    assert data["healthy"] is True and data["thresholds"] == {"max_age_s": None,
                                                              "fail_on": []}


def test_the_table_marks_estimates_and_expired_locks() -> None:
    lock = Lock("relay-b", NOW, alive=False)
    text = table(snapshot(topic("est", 123_456, exact=False, age=7200.0),
                          topic("held", 1, state="locked", lock=lock, age=3.0)))
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["TOPIC", "STATE", "BACKLOG"]
    assert "~123,456" in lines[1] and "2.0h" in lines[1]
    assert "EXPIRED" in lines[2] and "relay-b" in lines[2]
    assert "as of 2026-01-02T03:04:05.678901Z" in text


def test_the_table_names_a_lock_whose_holder_is_gone() -> None:
    lock = Lock("relay-c", NOW, alive=False, holder_gone=True)
    text = table(snapshot(topic("held", 1, state="locked", lock=lock, age=3.0)))
    assert "HOLDER GONE" in text.splitlines()[1] and "EXPIRED" not in text


def test_the_label_cap_keeps_the_first_n_by_name_and_folds_the_rest() -> None:
    topics = [topic(f"t{i:02d}", i + 1, age=float(i), parked=1,
                    state="backoff" if i == 23 else "ready", retries=7 if i == 23 else 0)
              for i in reversed(range(30))]
    series = capped(topics, TopicLabels(10))
    assert [s.label for s in series] == [f"t{i:02d}" for i in range(10)] + [OTHER]
    other = series[-1]
    assert other.backlog == sum(range(11, 31)) and other.parked == 20
    assert other.oldest_age_s == 29.0 and other.retries == 7
    assert other.states == {"ready": 19, "locked": 0, "backoff": 1}
    assert [s.label for s in capped(topics, TopicLabels(30))] == [f"t{i:02d}" for i in range(30)]


def test_a_topic_keeps_its_label_across_scrapes_whatever_the_backlogs_do() -> None:
    """The cap once ranked by backlog: a topic whose backlog grew took another's label on
    the next scrape, and both series broke. Now the first topics seen keep theirs."""
    labels = TopicLabels(3)
    first = [topic("b", 1), topic("d", 2), topic("c", 3), topic("e", 500)]
    assert [s.label for s in capped(first, labels)] == ["b", "c", "d", OTHER]
    # e's backlog is now the largest by far, and a topic that sorts first appeared.
    later = [topic("a", 10_000), topic("b", 0), topic("c", 0), topic("d", 0), topic("e", 9_000)]
    series = capped(later, labels)
    assert [s.label for s in series] == ["b", "c", "d", OTHER]
    assert series[-1].backlog == 19_000


def test_the_counters_and_the_gauges_cap_the_topic_label_alike() -> None:
    """The relay's counters and the exporter's gauges label the same topics as their own
    when they see the same topics: one rule, outbox_relay.observe.labels."""
    names = [f"t{i}" for i in (4, 0, 3, 1, 2)]
    metrics = RuntimeMetrics(MetricsConfig(max_label_topics=3), "src")
    for name in sorted(names):
        metrics.messages(name, "published", 1)
    counted = {s.labels["topic"] for f in metrics.registry.collect()
               if f.name == "outbox_relay_messages" for s in f.samples}
    gauges = families(snapshot(*(topic(n, 1) for n in names)), TopicLabels(3), 0.0)
    gauged = {s.labels["topic"] for f in gauges if f.name == "outbox_relay_backlog_messages"
              for s in f.samples}
    assert counted == gauged == {"t0", "t1", "t2", OTHER}


def test_a_topic_named_other_is_folded_so_no_two_series_share_a_label() -> None:
    series = capped([topic(OTHER, 100), topic("a", 1), topic("b", 2)], TopicLabels(2))
    assert [s.label for s in series] == ["a", "b", OTHER]
    assert series[-1].backlog == 100


def test_the_families_expose_the_metric_names_once_per_label() -> None:
    class Fixed:
        def collect(self):  # type: ignore[no-untyped-def]
            return families(snapshot(*(topic(f"t{i}", i, age=1.0) for i in range(5))),
                            TopicLabels(3), 0.01)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    parsed = {f.name: f for f in text_string_to_metric_families(
        generate_latest(registry).decode())}
    for name in ("backlog_messages", "oldest_message_age_seconds", "topic_state",
                 "topic_retries", "parked_messages", "ledger_staged_records"):
        assert f"outbox_relay_{name}" in parsed
    states = parsed["outbox_relay_topic_state"].samples
    assert len(states) == 4 * len(STATES)  # three topics and `other`
    assert {s.labels["topic"] for s in states} == {"t0", "t1", "t2", OTHER}


def test_delta_rows_count_once_and_only_this_outboxs(tmp_path: Path) -> None:
    """Rows of a batch still staged are counted from staging; another outbox's rows that
    share the ledger path are not counted; rows from before `origin` existed are."""
    pa = pytest.importorskip("pyarrow")
    from deltalake import write_deltalake

    now_us = 1_800_000_000_000_000
    minute = 60_000_000

    def rows(origin: str | None, batch: int, topic: str, ago_min: float, n: int) -> list[dict]:
        at = datetime.fromtimestamp((now_us - ago_min * minute) / 1e6, tz=UTC)
        return [{"topic": topic, "message_id": i, "outcome": "published", "session_id": "s",
                 "source": "r", "relayed_at": at, "copy_batch": batch, "origin": origin}
                for i in range(n)]

    data = (rows("mine", 1, "a", 2, 3) + rows("mine", 2, "a", 1, 5)  # batch 2 still staged
            + rows("mine", 1, "b", 30, 7) + rows("theirs", 1, "a", 1, 11)
            + rows(None, 0, "a", 3, 13) + rows("mine", 1, "a", 90, 17))  # 17: out of window
    write_deltalake(str(tmp_path / "ledger"), pa.Table.from_pylist(data))
    got = delta_counts(str(tmp_path / "ledger"), now_us - 5 * minute, now_us - 60 * minute,
                       "mine", staged_batches={2})
    assert got.error is None and got.exists
    assert dict(+got.last_5m) == {"a": 3 + 13}
    assert dict(+got.last_60m) == {"a": 3 + 13, "b": 7}


def test_a_missing_ledger_is_no_error_and_a_broken_one_is_reported(tmp_path: Path) -> None:
    assert delta_counts(str(tmp_path / "none"), 0, 0, "o", ()) == DeltaCounts()
    (tmp_path / "broken" / "_delta_log").mkdir(parents=True)
    (tmp_path / "broken" / "_delta_log" / "00000000000000000000.json").write_text("{not json")
    broken = delta_counts(str(tmp_path / "broken"), 0, 0, "o", ())
    assert broken.error and "Delta ledger" in broken.error

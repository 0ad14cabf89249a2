"""The benchmark's pure rules: repetition order, medians with min and max, the spoiled
window and its re-runs, saturation of the W2 curve, the soak's steadiness, the time
plan. No Spark, no stack."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import bench.workloads.drain as drain
from bench.backlog import Backlog
from bench.plan import make_plan
from bench.probes.javaperf import parse_rate
from bench.probes.outside import inside
from bench.relay_proc import last_copy_landed
from bench.repeat import alternate, by_repetition, run_measured, spoiled, spread, summarize
from bench.report.figures import soak_bounded
from bench.workloads.soak import per_minute_p99, steady
from bench.workloads.steady import wait_for_first_copy
from bench.workloads.w2c import saturated, slope

ALL = ["STARTSTOP", "W1", "W1H", "W2", "W3", "W3H", "W4", "W5", "W6", "SOAK", "W2C"]


def test_contenders_alternate_and_a_capped_one_runs_fewer_times() -> None:
    assert alternate(["r", "p", "b"], 2) == [(0, "r"), (0, "p"), (0, "b"),
                                             (1, "r"), (1, "p"), (1, "b")]
    assert alternate(["r", "p", "b"], 3, [None, None, 1]) == [
        (0, "r"), (0, "p"), (0, "b"), (1, "r"), (1, "p"), (2, "r"), (2, "p")]


def test_summary_is_the_median_with_min_max_and_runs() -> None:
    runs = [{"contender": "relay", "msgs_per_s": v, "latency_s": {"p99": v / 10},
             "log": f"l{v}", "rep": i} for i, v in enumerate([30.0, 10.0, 20.0])]
    runs.append({"contender": "peer", "msgs_per_s": 5.0, "latency_s": {"p99": 1.0}, "rep": 0})
    out = {o["contender"]: o for o in summarize(runs)}
    relay = out["relay"]
    assert relay["msgs_per_s"] == 20.0 and relay["runs"] == 3
    assert relay["range"]["msgs_per_s"] == [10.0, 30.0]
    assert relay["latency_s"]["p99"] == pytest.approx(2.0)
    assert relay["range"]["latency_s.p99"] == [1.0, 3.0]
    assert relay["log"] == "l30.0"  # not a number: the first run's
    assert out["peer"]["runs"] == 1
    assert spread([3.0, None, 1.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 2}


def test_by_repetition_puts_once_only_outcomes_in_every_repetition() -> None:
    outs: list[dict[str, Any]] = [{"contender": "relay", "rep": 0},
                                  {"contender": "relay", "rep": 1}, {"contender": "limit"}]
    reps = by_repetition(outs)
    assert [[o["contender"] for o in r] for r in reps] == [["relay", "limit"],
                                                           ["relay", "limit"]]


def test_a_spoiled_window_is_run_again_at_most_reruns_times() -> None:
    assert spoiled(1.2) and not spoiled(1.0) and not spoiled(None)
    seen: list[int] = []
    cores = iter([1.5, 0.2])

    def run(attempt: int) -> float:
        seen.append(attempt)
        return next(cores)

    result, discarded = run_measured(run, lambda c: c, reruns=2)
    assert result == 0.2 and seen == [0, 1] and len(discarded) == 1
    assert "1.50 cores" in discarded[0]["why"]
    always: list[int] = []

    def busy(attempt: int) -> float:
        always.append(attempt)
        return 3.0

    result, discarded = run_measured(busy, lambda c: c, reruns=2)
    assert always == [0, 1, 2] and len(discarded) == 2 and result == 3.0


def test_saturation_is_a_growing_backlog_or_one_not_gone() -> None:
    flat = [(float(t), 50) for t in range(10)]
    growing = [(float(t), 100 * t) for t in range(10)]
    assert slope(growing) == pytest.approx(100.0)
    assert not saturated(flat, 1000, caught_up=True)
    assert saturated(growing, 1000, caught_up=True)  # 100/s > 5% of 1,000/s
    assert saturated(flat, 1000, caught_up=False)


def test_the_soak_counts_jit_compilations_per_minute() -> None:
    from bench.report.more import jit_per_minute

    samples = [{"t": 15.0, "jit_compiled": 100}, {"t": 45.0, "jit_compiled": 300},
               {"t": 75.0, "jit_compiled": 900}, {"t": 105.0, "jit_compiled": 1000},
               {"t": 135.0, "jit_compiled": None}, {"t": 165.0, "jit_compiled": 1010}]
    # Minute 1 against minute 0's last sample, minute 2 against minute 1's.
    assert jit_per_minute(samples, 60.0) == [700, 10]
    assert jit_per_minute([{"t": 15.0}], 60.0) == []


def test_soak_per_minute_p99_and_first_against_last() -> None:
    created = {i: float(i) for i in range(240)}
    lat = {i: 0.1 if i < 120 else 0.2 for i in range(240)}
    assert per_minute_p99(created, lat, 0.0) == [0.1, 0.1, 0.2, 0.2]
    # A run that ended at 200 s: the minute it cut (180-200 s) is not a minute.
    assert per_minute_p99(created, lat, 0.0, end=200.0) == [0.1, 0.1, 0.2]
    assert per_minute_p99(created, lat, 0.0, end=240.0) == [0.1, 0.1, 0.2, 0.2]
    assert steady([0.1, 0.1, 0.1, 0.1], 2)["steady"]
    result = steady([0.1, 0.1, 0.2, 0.2], 2)
    assert result["ratio"] == pytest.approx(2.0) and not result["steady"]
    growing = soak_bounded([{"active_files": n, "parquet_files": n, "queue_bytes": 8192}
                            for n in (1, 2, 3, 40)])
    assert not growing["active_files"]["bounded"] and growing["queue_bytes"]["bounded"]
    # Compacted every 10 copies: the table's files saw-tooth while those on disk pile up
    # until VACUUM, which is reported but not judged.
    compacted = soak_bounded([{"active_files": n % 10 + 1, "parquet_files": n,
                               "queue_bytes": 8192} for n in range(40)])
    assert compacted["active_files"]["bounded"] and set(compacted) == {"active_files",
                                                                       "queue_bytes"}


def test_the_outside_set_excludes_our_tree_and_the_stacks() -> None:
    parents = {1: 0, 10: 1, 11: 10, 12: 11, 20: 1, 21: 20, 30: 1}
    assert inside(parents, {10, 20}) == {10, 11, 12, 20, 21}


def test_producer_performance_summary_is_parsed() -> None:
    out = ("5000 records sent, 999.0 records/sec\n"
           "10000 records sent, 61050.1 records/sec (58.50 MB/sec), 12.3 ms avg latency")
    assert parse_rate(out) == (10000, 61050.1)


def test_the_plan_keeps_three_runs_and_cuts_elsewhere_first() -> None:
    quick = make_plan(ALL, 3, quick=True, profile=True)
    assert quick.total_s <= quick.budget_s and not quick.cuts
    assert quick.repeat["W1"] == 3 and quick.repeat["SOAK"] == 1
    tight = make_plan(["W1", "W2"], 3, quick=False, profile=True, budget_s=40 * 60)
    assert tight.cuts[:2] == ["the one-delete peer runs once", "no profiling or EXPLAIN runs"]
    assert tight.total_s <= 40 * 60 and tight.repeat["W1"] >= 2
    full = make_plan(ALL, 3, quick=False, profile=True)
    assert all(r >= 2 for r in full.repeat.values() if r > 1)
    assert full.lines()[-1].startswith("cut:")
    # The margin counts: the estimate it must fit is above the plain sum.
    assert full.total_s > sum(full.estimate_s.values())
    assert full.total_s <= full.budget_s
    # Rows without a target are capped before a target's contender is.
    order = [c for c in full.cuts if "cap" in c]
    assert order[0].startswith("the one-delete peer capped")
    assert full.to_json()["peer_batch_cap_s"] is not None


def test_the_one_delete_peer_is_capped_apart_from_the_held_horizon() -> None:
    def cap(plan: dict[str, Any], delete: str, held: bool) -> float | None:
        drains = drain.Drains(SimpleNamespace(plan=plan, env=None))  # type: ignore[arg-type]
        return drains._peer_cap(delete, held)

    assert cap({}, "groups", False) is None and cap({}, "batch", False) is None
    assert cap({"peer_held_cap_s": 240}, "groups", True) == 240
    both = {"peer_held_cap_s": 240, "peer_batch_cap_s": 60}
    assert cap(both, "batch", False) == 60
    assert cap(both, "batch", True) == 60
    assert cap(both, "groups", False) is None


def test_the_relays_warm_up_waits_until_its_first_copy_is_confirmed(tmp_path: Path) -> None:
    log = tmp_path / "relay.log"
    assert not wait_for_first_copy(log, 0.1)  # no log yet
    log.write_text("2026-11-27 12:27:19,001 INFO outbox_relay.stream.runner: started\n")
    assert not wait_for_first_copy(log, 0.1)  # a commit alone is not the copy's end
    with log.open("a") as f:
        f.write("2026-11-27 12:27:20,010 INFO outbox_relay.ledger.delta: ledger: copy batch 1 "
                "is in Delta\n")
    assert wait_for_first_copy(log, 0.1)


def test_w4_ratios_need_drains_that_exited_cleanly_and_the_soak_cell_names_its_series() -> None:
    from bench.report.figures import figures_of
    from bench.report.sections import fmt

    def w4(code: int) -> dict[str, Any]:
        return {"W4": [{"contender": "relay", "rows": n, "jvm_peak_rss_mb": 100.0 * n,
                        "heap_after_gc_max_mb": 50.0, "exit_code": code} for n in (1, 5)]}

    assert figures_of(w4(0))["relay"]["w4_heap_ratio"] == pytest.approx(1.0)
    assert "w4_heap_ratio" not in figures_of(w4(52)).get("relay", {})  # out of heap
    assert fmt({"active_files": None, "queue_bytes": {"bounded": True}}, "bounded") == \
        "active_files not sampled; queue_bytes bounded"


def test_exit_codes_are_listed_not_averaged() -> None:
    runs = [{"contender": "relay", "msgs_per_s": 1.0, "exit_code": c} for c in (0, 52)]
    (merged,) = summarize(runs)
    assert (merged["exit_codes"], merged["exit_code"]) == ([0, 52], 52)


def test_a_capped_drain_is_rated_by_what_kafka_received(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Watch:
        samples = [(100.0, 0), (250.0, 600), (400.0, 880)]

        def first_at(self) -> float:
            return 101.0

        def last_change_at(self) -> float:
            return 400.0

    monkeypatch.setattr(drain, "outbox_count", lambda url: 120)
    backlog = Backlog(1000, ("t",), 10)
    capped = drain.drain_outcome("peer", backlog, Watch(), 99.0, 400.0, "u", 100.0,  # type: ignore[arg-type]
                                 capped=True)
    assert capped.rows == 880 and capped.msgs_per_s == pytest.approx(880 / 300)
    assert capped.extra["backlog_rows"] == 1000
    whole = drain.drain_outcome("peer", backlog, Watch(), 99.0, 400.0, "u", 100.0)  # type: ignore[arg-type]
    assert whole.rows == 1000


def test_the_ledger_copy_ends_at_the_last_batch_the_relay_logged_in_delta() -> None:
    text = ("26/11/27 12:25:51 INFO SparkContext: Running Spark version 4.2.0\n"
            "2026-11-27 12:27:20,010 INFO outbox_relay.ledger.delta: ledger: copy batch 1 is in "
            "Delta\n"
            "2026-11-27 12:27:26,104 INFO outbox_relay.ledger.delta: ledger: copy batch 2 is in "
            "Delta\n"
            "outbox-relay: 1000000 messages delivered in 89.5 s (4 batches)\n")
    landed, first = last_copy_landed(text), last_copy_landed(text.splitlines()[1])
    assert landed is not None and first is not None
    assert landed - first == pytest.approx(6.094)
    assert last_copy_landed("no copy\n") is None

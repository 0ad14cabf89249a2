"""The default benchmark's pure rules: what it reads from the relay's output, the
start-up breakdown, relay / peer with a capped peer, latency windows, the relay's
processes from /proc, and the targets and page built from one run's results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.contenders import relay_output
from bench.procs import DRIVER, JVM, cpu_between, kind_of, rss_of, tree
from bench.report.md import markdown
from bench.report.targets import plan_name, rows, startup
from bench.run import parts_of
from bench.workloads.drain import versus
from bench.workloads.latency import cases, window
from bench.workloads.many import ORDER, ceiling, pooled

LAUNCH = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def _json_line(seconds_after_launch: float, message: str) -> str:
    from datetime import UTC, datetime

    at = datetime.fromtimestamp(LAUNCH + seconds_after_launch, UTC)
    return json.dumps({"time": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                       "level": "DEBUG", "logger": "outbox_relay.app", "message": message})


def test_the_relay_output_gives_its_summary_lanes_and_start_up_marks(tmp_path: Path) -> None:
    log = tmp_path / "relay.log"
    log.write_text("\n".join([
        "26/01/15 08:00:01 WARN NativeCodeLoader: Unable to load native-hadoop library",
        _json_line(2.5, "start-up: the relay's Python runs"),
        _json_line(3.25, "start-up: the services answer"),
        _json_line(3.5, "start-up: the relay is wired"),
        _json_line(3.75, "start-up: building the Spark session beside the first rounds"),
        "{not json",
        _json_line(9.0, "start-up: the Spark session is ready"),
        "outbox-relay: 1000 messages delivered in 5.1 s (3 batches)",
        "outbox-relay: 700 by the driver's producer, 300 by Spark's executors",
    ]))
    out = relay_output(log, LAUNCH)
    assert out["summary"] == {"delivered": 1000, "seconds": 5.1, "batches": 3}
    assert out["lanes"] == {"direct": 700, "spark": 300}
    assert out["marks_s"] == {"python": 2.5, "services": 3.25, "wired": 3.5,
                              "session_building": 3.75, "session_ready": 9.0}


def test_a_relay_without_debug_log_or_summary_gives_neither(tmp_path: Path) -> None:
    (tmp_path / "relay.log").write_text("outbox-relay: failed\n")
    assert relay_output(tmp_path / "relay.log", LAUNCH) == {"log": "relay.log"}


def test_the_start_up_breakdown_is_each_step_after_the_one_before() -> None:
    run = {"marks_s": {"python": 2.5, "services": 3.25, "wired": 3.5}, "first_record_s": 4.25,
           "last_record_s": 4.5, "exit_s": 6.0, "lanes": {"direct": 1000, "spark": 0}}
    assert startup(run) == (
        "spark-submit's launch to the relay's Python 2.50; to the services answering 0.75; "
        "to the relay wired 0.25; to the first record in Kafka 0.75 (no Spark session built; "
        "1,000 by the driver's producer, 0 by Spark's executors)")
    assert startup(run, "exit_s").endswith(
        "to the last record 0.25; to the exit 1.50 (no Spark session built; 1,000 by the "
        "driver's producer, 0 by Spark's executors)")
    assert startup({}) == "no start-up marks"


def test_relay_over_peer_is_a_rate_ratio_and_a_capped_peer_makes_it_a_lower_bound() -> None:
    relay = {"missing": 0, "msgs_per_s": 20_000, "exit_s": 80.0}
    peer = {"msgs_per_s": 8_000, "exit_s": 140.0, "capped_at_s": None}
    assert versus(relay, peer) == {"peer_capped": False, "drain_ratio": 2.5, "exit_ratio": 1.75}
    assert versus(relay, {**peer, "capped_at_s": 120.0})["peer_capped"] is True
    # A relay that lost or never sent a row has no ratio to show.
    assert "drain_ratio" not in versus({**relay, "missing": 3}, peer)


def test_a_latency_window_holds_the_messages_committed_within_it() -> None:
    t0 = 100.0
    sent = {0: 104.0, 1: 105.5, 2: 106.0, 3: 170.0}
    received = {0: 104.5, 1: 105.7, 3: 170.1}
    got = window(sent, received, t0, (5.0, 65.0), 0.5)
    assert got == {"n": 2, "missing": 1, "p50_s": 0.2, "p99_s": 0.2, "max_s": 0.2,
                   "late": {"over_s": 0.5, "n": 1, "committed_from_s": 6.0,
                            "committed_to_s": 6.0}}  # the missing one waited for ever
    received[2] = 106.1
    assert window(sent, received, t0, (5.0, 65.0), 0.5)["late"] is None
    lat = cases(60.0, 30.0)
    assert lat["LAT1000"].windows == {"first_minute": (5.0, 65.0)}
    assert lat["LAT500"].windows["steady"] == (65.0, 125.0) and lat["LAT500"].until_s == 125.0


def _proc(root: Path, pid: int, ppid: int, utime: int, rss_pages: int, *argv: str) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(utime), "0"] + ["0"] * 8 + [str(rss_pages)]
    (d / "stat").write_text(f"{pid} ({Path(argv[0]).name[:15]}) {' '.join(fields)}\n")


def test_the_relay_processes_are_the_tree_under_spark_submit_by_kind(tmp_path: Path) -> None:
    _proc(tmp_path, 1, 0, 0, 1, "init")
    _proc(tmp_path, 10, 1, 500, 1000, "/usr/bin/java", "org.apache.spark.deploy.SparkSubmit")
    _proc(tmp_path, 20, 10, 200, 500, "python", "jobs/relay.py", "--config", "conf/local.toml")
    _proc(tmp_path, 30, 10, 100, 100, "python", "-m", "pyspark.daemon", "pyspark.worker")
    _proc(tmp_path, 40, 1, 900, 900, "python", "-m", "pytest")  # not the relay's
    procs = tree(10, tmp_path)
    assert sorted(procs) == [10, 20, 30]
    worker = "Python pyspark.worker"
    assert [procs[p].kind for p in (10, 20, 30)] == [JVM, DRIVER, worker]
    assert kind_of(["/opt/jdk/bin/java", "-cp", "x"]) == JVM
    assert kind_of(["python", "-m", "pyspark.sql.streaming.python_streaming_source_runner"]) \
        == "Python pyspark.sql.streaming.python_streaming_source_runner"
    later = {pid: p.__class__(p.kind, p.cpu_s + 1.0, p.rss_mb) for pid, p in procs.items()}
    later[50] = procs[30].__class__(worker, 2.0, 1.0)  # a worker started meanwhile
    used = cpu_between(procs, later, 10.0)
    assert used == {"cores": 0.5, "by_kind": {DRIVER: 0.1, JVM: 0.1, worker: 0.3}}
    assert set(rss_of(procs)) == {JVM, DRIVER, worker}


def _results() -> dict[str, Any]:
    relay = {"first_record_s": 3.0, "last_record_s": 4.0, "exit_s": 7.5, "exit_code": 0,
             "msgs_per_s": 1000, "missing": 0, "distinct": 1000, "duplicates": 0,
             "inversions": 0, "lanes": {"direct": 1000, "spark": 0},
             "marks_s": {"python": 2.0, "services": 2.5, "wired": 2.75}}
    peer = {"first_record_s": 0.5, "exit_s": 2.0, "msgs_per_s": 500, "capped_at_s": None,
            "peer_select_plan": "Index Scan using index_kafka_messages_on_topic_and_id on x"}
    return {
        "meta": {"started": "s", "ended": "e", "git": "abc1234", "quick": True,
                 "machine": {"cores": 2}, "quiet_check": {"forced": False}},
        "FIRST": {"relay": relay, "peer": peer},
        "DRAIN": {"relay": relay, "peer": peer},
        "W1": {"relay": {**relay, "drain_s": 40.0}, "peer": {**peer, "drain_s": 100.0},
               "drain_ratio": 2.5, "exit_ratio": 1.2},
        "LAT500": {"steady": {"n": 30000, "missing": 0, "p50_s": 0.05, "p99_s": 0.15,
                              "max_s": 0.2, "cores": 0.25, "cpu_s": 15.0, "cpu_s_per_1k": 0.5,
                              "by_kind": {JVM: 0.2, DRIVER: 0.05}},
                   "memory": {"peak_gb": 0.9, "by_kind_mb": {JVM: 700}},
                   "idle": {"cores": 0.01, "by_kind": {JVM: 0.01}}},
    }


def test_each_target_is_met_missed_or_not_measured_with_the_misses_measured() -> None:
    got = {row["target"]: row for row in rows(_results())}
    first = got["launch to the first record delivered, 1,000 messages waiting on a new "
                "topic (s)"]
    assert (first["figure"], first["met"], first["beside"]) == (3.0, True, "peer 0.5 s")
    cpu = got["500 msg/s, steady state: CPU of the relay's processes (cores)"]
    assert cpu["met"] is False and cpu["why"] == "driver JVM 0.2 cores, relay's Python 0.05 cores"
    drain = got["scheduled drain, 1,000 messages over 10 topics (--available-now): launch to "
                "exit (s)"]
    assert drain["met"] is False and "to the exit 3.50" in drain["why"]
    w1 = got["W1, 1M x 1 KB over 10 topics, the table with a history: drain (first record to "
             "last), relay / peer"]
    assert w1["met"] is True and "index_kafka_messages_on_topic_and_id" in w1["beside"]
    assert got["W1, 1M x 1 KB over 10 topics, the table with a history: launch to exit, "
               "relay / peer"]["met"] is False
    assert not any(name.startswith("W3") for name in got)  # not run
    results = {**_results(), "W3": {"relay": {}, "peer": {}}}  # the relay missed rows
    w3 = {row["target"]: row for row in rows(results) if row["target"].startswith("W3")}
    assert [(row["figure"], row["met"], row["bound"]) for row in w3.values()] == [
        (None, None, ">= 2"), (None, None, "-")]
    lanes = got["lanes: the relay's messages by lane (its summary line)"]["figure"]
    assert lanes.startswith("W1: 1,000 by the driver's producer, 0 by Spark's executors")


def test_the_page_shows_the_targets_and_what_the_misses_measured() -> None:
    page = markdown(_results())
    assert "> **Quick run**" in page
    assert "| 500 msg/s, steady state: CPU of the relay's processes (cores) | <= 0.1 | 0.25 |" \
        in page
    assert "## What the misses measured" in page
    assert "- **idle: CPU" not in page  # met


def test_the_peer_plan_is_named_by_its_index() -> None:
    walk = "Index Scan using kafka_messages_pkey on kafka_messages"
    bitmap = ("Bitmap Heap Scan on kafka_messages; Bitmap Index Scan on "
              "index_kafka_messages_on_topic_and_id")
    assert plan_name({"peer_select_plan": walk}) == "kafka_messages_pkey"
    assert plan_name({"peer_select_plan": bitmap}) == "index_kafka_messages_on_topic_and_id"
    assert plan_name({"peer_select_plan": "Seq Scan on kafka_messages"}) == \
        "Seq Scan on kafka_messages"


def test_an_unknown_part_is_refused_by_name() -> None:
    assert parts_of("w1, lat") == ["W1", "LAT"]
    with pytest.raises(SystemExit, match="unknown part"):
        parts_of("W1,W5")


def test_the_many_ceiling_is_the_rest_of_the_machine_alone_against_the_peers() -> None:
    """The relay's processes 97.9 CPU-s of the machine's 130 over its run: the rest, 32.1
    CPU-s, take 16.05 s on two cores at least, so 800,000 messages go at most at 49,844
    msg/s, 1.8 times the peers' 27,731."""
    relay = {"cpu_machine_s": 130.0, "cpu_tree_s": 97.9}
    got = ceiling(relay, {"msgs_per_s": 27_731}, 2, 800_000)
    assert got == {"rest_cpu_s": 32.1, "floor_s": 16.05, "ceiling_ratio": 1.8}
    assert ceiling({}, {"msgs_per_s": 1}, 2, 10) == {}, "not measured: no figure"
    row = {r["target"]: r for r in rows({"MANY": got})}
    name = next(n for n in row if n.startswith("MANY: relay / peer at most"))
    assert (row[name]["figure"], row[name]["met"], row[name]["beside"]) == (
        1.8, None, "the rest 32.1 CPU-s: 16.1 s at least")


def test_many_runs_each_contender_first_once_and_last_once() -> None:
    assert ORDER[0] == ORDER[-1] != ORDER[1] == ORDER[2]
    assert sorted(ORDER) == sorted(["relay", "relay", "peer", "peer"])


def test_many_pools_a_contenders_two_drains_into_one_rate() -> None:
    """400,000 messages in 10 s, then 400,000 in 30 s: 800,000 in 40 s is 20,000 msg/s,
    not the 26,667 of the two rates' mean; the times are the drains' means."""
    first = {"delivered": 400_000, "drain_s": 10.0, "exit_s": 14.0, "first_record_s": 3.0,
             "last_record_s": 13.0, "missing": 0, "duplicates": 2, "cpu_tree_s": 8.0,
             "cpu_machine_s": 20.0, "exit_codes": [0], "lanes": {"direct": 400_000, "spark": 0}}
    second = {**first, "drain_s": 30.0, "exit_s": 34.0, "duplicates": 0, "cpu_tree_s": 12.0,
              "exit_codes": [0], "lanes": {"direct": 300_000, "spark": 100_000}}
    got = pooled([first, second])
    assert (got["delivered"], got["msgs_per_s"], got["drain_s"], got["exit_s"]) == (
        800_000, 20_000, 20.0, 24.0)
    assert (got["duplicates"], got["cpu_tree_s"], got["cpu_tree_s_per_1k"]) == (2, 20.0, 0.025)
    assert got["lanes"] == {"direct": 700_000, "spark": 100_000}
    assert got["exit_codes"] == [0, 0]
    # A drain that failed before its figures: the pool keeps only what every drain has.
    broken = pooled([first, {"exit_codes": [1], "outbox_left": 5}])
    assert "msgs_per_s" not in broken and "drain_s" not in broken
    assert broken["exit_codes"] == [0, 1] and "lanes" not in broken
    assert "drain_ratio" not in versus(broken, pooled([first, second]))


def test_many_reports_each_orders_ratio_beside_the_pooled_one() -> None:
    many = {"drain_ratio_by_order": [1.51, 2.1],
            "drains": {"relay": [{"drain_s": 20.9}, {"drain_s": 15.0}],
                       "peer": [{"drain_s": 31.6}, {"drain_s": 31.5}]}}
    row = {r["target"]: r for r in rows({"MANY": many})}
    name = next(n for n in row if n.startswith("MANY, each order's drain alone"))
    assert (row[name]["figure"], row[name]["beside"]) == (
        "1.51; 2.1", "drains: relay 20.9 s, 15.0 s; peers 31.6 s, 31.5 s")


def test_a_pair_without_a_recorded_plan_names_none() -> None:
    """MANY's eight peers record no select plan: its rows say nothing of one, where a
    peer that recorded one is named by it."""
    relay = {"drain_s": 14.4}
    many = rows({"MANY": {"relay": relay, "peer": {"drain_s": 30.5}}})
    assert all("select on" not in r["beside"] for r in many)
    walk = "Index Scan using kafka_messages_pkey on kafka_messages"
    w1 = rows({"W1": {"relay": relay, "peer": {"drain_s": 30.5, "peer_select_plan": walk}}})
    assert any("the peer's select on kafka_messages_pkey" in r["beside"] for r in w1)

"""The benchmark's quiet-machine gate finds rival pytest and Spark processes, but never
the benchmark's own process or the shell that started it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.probes.quiet import (
    MAX_BROKER_PARTITIONS,
    NotQuiet,
    check_broker,
    cpu_busy,
    rival_processes,
)


def _proc(root: Path, pid: int, ppid: int, *argv: str) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "stat").write_text(f"{pid} ({argv[0][:15]}) S {ppid} 1 1 0 -1\n")


def test_rivals_are_found_and_the_own_tree_is_not(tmp_path: Path) -> None:
    _proc(tmp_path, 1, 0, "init")
    _proc(tmp_path, 10, 1, "bash")
    _proc(tmp_path, 20, 10, "python", "-m", "pytest", "-m", "bench")  # starts the bench
    _proc(tmp_path, 30, 20, "python", "-m", "bench", "run")  # the benchmark itself
    _proc(tmp_path, 40, 1, "python", "-m", "pytest", "tests")
    _proc(tmp_path, 50, 1, "java", "-cp", "x", "org.apache.spark.deploy.SparkSubmit", "a.py")
    _proc(tmp_path, 60, 1, "postgres", "-D", "data")
    (tmp_path / "self").mkdir()
    found = rival_processes(tmp_path, own=30)
    assert sorted(line.split(":")[0] for line in found) == ["40", "50"]


def test_cpu_busy_is_the_share_of_non_idle_time_between_two_samples(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait ...: 100 jiffies pass, 30 of them idle or iowait.
    samples = iter(["cpu  100 0 50 800 50 0 0 0 0 0\n", "cpu  150 0 70 820 60 0 0 0 0 0\n"])
    stat.write_text(next(samples))
    monkeypatch.setattr("bench.probes.quiet.time.sleep",
                        lambda _s: stat.write_text(next(samples)))
    assert cpu_busy(5.0, stat) == 0.7


def test_a_broker_cluttered_with_leftover_partitions_is_refused_unless_forced() -> None:
    quiet = {"load1": 0.2, "rivals": [], "forced": False, "why_forced": []}
    assert check_broker(MAX_BROKER_PARTITIONS, quiet, force=False) == {
        **quiet, "broker_partitions": MAX_BROKER_PARTITIONS}
    with pytest.raises(NotQuiet, match="4,771 partitions > 1,000"):
        check_broker(4771, quiet, force=False)
    forced = check_broker(4771, {**quiet, "why_forced": ["load"]}, force=True)
    assert forced["forced"] is True and forced["broker_partitions"] == 4771
    assert forced["why_forced"][0] == "load" and "4,771 partitions" in forced["why_forced"][1]

"""Profiling runs: where the relay's time goes (not the benchmark's figures). The relay
runs in-process with timers (bench/probes/profile.py), and optionally every statement under
EXPLAIN ANALYZE."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.backlog import Backlog, load
from bench.common import (
    PROFILES,
    REPO,
    W1_KEYS,
    W1_PARTITIONS,
    W1_TOPICS,
    W2_KEYS,
    W2_PARTITIONS,
    W2_RATE,
    W2_TOPICS,
    W2_TX,
    Scale,
)
from bench.env import BenchEnv, wait_empty
from bench.workloads.latency import Load, generate
from outbox_relay.config import Config


def _phase_stats(timings: dict[str, Any]) -> dict[str, dict[str, float]]:
    import statistics

    batches = timings["batches"]
    keys: list[str] = []
    for b in batches:
        keys += [k for k in b if k != "started_at" and k not in keys]
    out: dict[str, dict[str, float]] = {}
    for k in keys:
        vals = [b.get(k, 0.0) * 1000 for b in batches]
        out[k] = {"mean_ms": statistics.mean(vals), "p50_ms": statistics.median(vals),
                  "max_ms": max(vals), "calls": sum(1 for b in batches if k in b)}
    gaps = [(b2["started_at"] - b1["started_at"] - b1["foreachBatch"]) * 1000
            for b1, b2 in itertools.pairwise(batches)]
    if gaps:
        out["between foreachBatch calls (Spark)"] = {
            "mean_ms": statistics.mean(gaps), "p50_ms": statistics.median(gaps),
            "max_ms": max(gaps), "calls": len(gaps)}
    progress = [p["durationMs"] for p in timings["progress"] if "addBatch" in p["durationMs"]]
    for k in ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
              "triggerExecution"):
        vals = [float(p.get(k, 0)) for p in progress]
        if vals:
            out[f"Spark progress: {k}"] = {"mean_ms": statistics.mean(vals),
                                           "p50_ms": statistics.median(vals),
                                           "max_ms": max(vals), "calls": len(vals)}
    if "ledger flush" in timings["totals"]:
        n = timings["counts"]["ledger flush"]
        total = timings["totals"]["ledger flush"] * 1000
        out["ledger flush (own thread, per call)"] = {
            "mean_ms": total / n, "p50_ms": total / n, "max_ms": total / n, "calls": n}
    return out


class Profiles:
    """In-process relay runs with timers (bench/probes/profile.py) and EXPLAIN capture."""

    def __init__(self, env: BenchEnv, scale: Scale) -> None:
        self.env = env
        self.scale = scale

    def _start(self, label: str, config: Config,
               args: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        from tests.integration.process import write_profile

        run_dir = self.env.run_dir(label)
        profile = write_profile(config, run_dir / "profile.toml")
        out = run_dir / "timings.json"
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        with open(run_dir / "profile.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.probes.profile", "--config", str(profile),
                 "--out", str(out), *args],
                cwd=REPO, env=child_env, stdout=log, stderr=subprocess.STDOUT,
            )
        return proc, out

    def latency(self, label: str = "prof-w2-0",
                **overrides: dict[str, Any]) -> dict[str, Any]:
        """Continuous relay under W2's load: per-micro-batch breakdown."""
        env = self.env
        topics = env.topic_names(label, W2_TOPICS)
        env.create_topics(topics, W2_PARTITIONS)
        url = env.fresh_database(label)
        sections = {k: dict(v) for k, v in PROFILES["W2"].items()}
        for key, values in overrides.items():
            sections.setdefault(key, {}).update(values)
        config = env.relay_config(url, label, **sections)
        seconds = 20.0 if self.scale.quick else 40.0
        proc, out = self._start(label, config, [])
        run_dir = env.run_dir(label)
        try:
            generate(url, Load(100, W2_TX, 0.1, tuple(topics), W2_KEYS), run_dir / "probe.bin",
                     start_seq=3 * 10**12)
            wait_empty(url, 600)
            generate(url, Load(W2_RATE, W2_TX, seconds, tuple(topics), W2_KEYS),
                     run_dir / "generated.bin")
            wait_empty(url, 120)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
        result = json.loads(out.read_text())
        env.drop_database(url)
        env.delete_topics(topics)
        return {
            "description": f"Continuous relay, {W2_RATE} msg/s in transactions of {W2_TX} for "
                           f"{seconds:.0f} s, W2's profile.",
            "batches": len(result["batches"]),
            "phases": _phase_stats(result),
        }

    def drain(self, explain: bool) -> dict[str, Any]:
        """A W1-shaped drain; with `explain`, every statement is EXPLAIN ANALYZEd."""
        label = f"prof-w1-{int(explain)}"
        env = self.env
        rows = self.scale.w1_rows
        topics = env.topic_names(label, W1_TOPICS)
        env.create_topics(topics, W1_PARTITIONS)
        url = env.fresh_database(label)
        load(url, Backlog(rows, tuple(topics), W1_KEYS))
        config = env.relay_config(url, label, **{k: dict(v) for k, v in PROFILES["W1"].items()})
        args = ["--available-now"]
        explain_file = env.run_dir(label) / "explain.json"
        if explain:
            args += ["--explain", str(explain_file)]
        proc, out_file = self._start(label, config, args)
        if proc.wait(3600) != 0:
            raise RuntimeError(f"profile run {label} failed: see its profile.log")
        timings = json.loads(out_file.read_text())
        env.drop_database(url)
        env.delete_topics(topics)
        batches = timings["batches"]
        startup = {
            "SparkSession built (s)": round(timings["session_s"], 2),
            "relay wiring built (s)": round(timings.get("build_relay_s", 0.0), 2),
            "query start to first micro-batch body (s)": round(
                batches[0]["started_at"] - timings["run_started_at"], 2) if batches and
            "run_started_at" in timings else None,
            "first micro-batch body (s)": round(batches[0]["foreachBatch"], 2)
            if batches else None,
        }
        out: dict[str, Any] = {
            "startup": startup,
            "description": f"Drain of {rows:,} rows (W1's shape and profile), in-process"
                           + (", every statement explained first (so slower)." if explain
                              else "."),
            "batches": len(timings["batches"]),
            "phases": _phase_stats(timings),
        }
        if explain:
            out["statements"] = json.loads(explain_file.read_text())
        return out

"""Backlog drains (W1, W1H, W3, W3H, W4, W6): every contender on the same backlog, in
turn and repeated (relay, peer, peer one-delete, relay, ...), each on a fresh database
and fresh topics; the backlog is inserted before it starts and is not measured."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.backlog import Backlog, load
from bench.common import (
    PEER,
    PEER_BATCH,
    PEER_HELD_CAP_S,
    RELAY,
    REPO,
    Outcome,
    horizon,
    in_repo,
    log,
    sys_load,
    thin,
)
from bench.context import Bench
from bench.env import LockWatch, OffsetWatch, outbox_count
from bench.probes.cpu import CpuMeter
from bench.probes.heapprobe import HeapProbe
from bench.relay_proc import last_copy_landed, launch
from bench.repeat import alternate


def drain_outcome(name: str, backlog: Backlog, watch: OffsetWatch, started: float,
                  ended: float, url: str, first_lock: float | None,
                  capped: bool = False) -> Outcome:
    """seconds: first lock (the first batch starts) to the last record in Kafka.

    Start-up (launch to first lock) and the end-to-end time are reported beside it. A run
    stopped at its cap counts what Kafka received, not the backlog it did not finish.
    """
    first = watch.first_at()
    last = watch.last_change_at()
    delivered = watch.samples[-1][1] if watch.samples else 0
    begin = first_lock if first_lock is not None else started
    drain_s = (last - begin) if last else ended - started
    rows = min(delivered, backlog.rows) if capped else backlog.rows
    steady = rows / (last - first) if first and last and last > first else None
    return Outcome(
        contender=name, rows=rows, seconds=drain_s, window=(started, ended),
        extra={
            "backlog_rows": backlog.rows,
            "startup_s": round(begin - started, 2),
            "end_to_end_s": round(ended - started, 2),
            "end_to_end_msgs_per_s": round(rows / (ended - started), 1),
            "first_record_after_s": round(first - started, 2) if first else None,
            "first_to_last_s": round(last - first, 2) if first and last else None,
            "steady_msgs_per_s": round(steady, 1) if steady else None,
            "kafka_records": delivered,
            "duplicates": max(0, delivered - backlog.rows),
            "outbox_left": outbox_count(url),
            "progress": thin(watch.samples, started),
            "drain_window": [begin, last or ended],
        },
    )


class Drains:
    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.env = bench.env

    def _drain_cpu(self, outcome: Outcome) -> None:
        """Whole-machine CPU over the drain window alone (first lock to last record), so a
        copy the relay defers past it (the ledger's) is told apart."""
        begin, end = outcome.extra["drain_window"]
        used = self.bench.outside.machine_cpu(begin, end) if self.bench.outside else None
        if used is not None:
            outcome.extra["cpu_machine_drain_s_per_1k"] = round(1000 * used / outcome.rows, 4)

    def _ledger_cpu(self, outcome: Outcome, relay_log: Path) -> None:
        """The Delta ledger's share: an available-now drain copies its staged records once,
        at its end (`ledger.drain_flush_interval_s` is longer than any drain here), so the
        copy runs from the last record in Kafka to its last batch landing in Delta. The
        whole machine's CPU over that window (PostgreSQL's read of the staging included)
        is the ledger's, and nothing else of the relay's runs then but its last delete."""
        text = relay_log.read_text(errors="replace") if relay_log.exists() else ""
        landed = last_copy_landed(text)
        drained = outcome.extra["drain_window"][1]
        if landed is None or landed <= drained:
            return
        outcome.extra["ledger_copy_s"] = round(landed - drained, 2)
        used = self.bench.outside.machine_cpu(drained, landed) if self.bench.outside else None
        if used is not None:
            outcome.extra["cpu_machine_ledger_s_per_1k"] = round(1000 * used / outcome.rows, 4)

    def relay(self, workload: str, label: str, backlog: Backlog, partitions: int,
              deadline_s: float = 60.0, held: bool = False,
              live_set: bool = False, heap_probe: bool = False,
              **more: dict[str, Any]) -> Outcome:
        env = self.env
        url = env.fresh_database(label)
        with horizon(url, held) as held_horizon:
            seconds_load = load(url, backlog)
            config = self.bench.config(workload, url, label, relay={
                "available_now_deadline_s": deadline_s}, **more)
            watch = OffsetWatch(env.admin, backlog.topics, partitions).start()
            locks_watch = LockWatch(url).start()
            load_before = sys_load()
            cpu = CpuMeter()
            proc = launch(config, env.run_dir(label), "--available-now",
                          live_set=live_set)
            probe = HeapProbe(watch, backlog.rows, lambda: proc.jvm_pid,
                              env.run_dir(label) / "histograms",
                              config.kafka.batch_size).start() if heap_probe else None
            code = proc.wait(timeout_s=3600)
            if probe is not None:
                probe.stop()
            cpu.stop()
            watch.stop()
            locks_watch.stop()
        outcome = drain_outcome(RELAY, backlog, watch,
                                proc.launched_at, proc.exited_at or time.time(), url,
                                locks_watch.first_lock_at)
        outcome.extra.update(
            exit_code=code, load_s=round(seconds_load, 1), sysload_before=load_before,
            sysload_after=sys_load(), **proc.summary(), log=in_repo(proc.log),
            **cpu.to_json(backlog.rows),
        )
        if probe is not None:
            outcome.extra.update(probe.summary(proc.driver_gc_log()))
        self._drain_cpu(outcome)
        self._ledger_cpu(outcome, proc.log)
        if held_horizon is not None:
            outcome.extra["horizon"] = held_horizon.to_json()
        env.drop_database(url)
        return outcome

    def peer(self, label: str, backlog: Backlog, partitions: int, delete: str,
             held: bool = False) -> Outcome:
        env = self.env
        url = env.fresh_database(label)
        run_dir = env.run_dir(label)
        capped = False
        cap = self._peer_cap(delete, held)
        with horizon(url, held) as held_horizon:
            seconds_load = load(url, backlog)
            watch = OffsetWatch(env.admin, backlog.topics, partitions).start()
            locks_watch = LockWatch(url).start()
            load_before = sys_load()
            cpu = CpuMeter()
            started = time.time()
            try:
                subprocess.run(
                    [sys.executable, "-m", "bench.peer", "--url", url, "--bootstrap",
                     env.stack.kafka_bootstrap, "--delete", delete, "--drain",
                     "--stats", str(run_dir / "peer.json")],
                    cwd=REPO, check=True, timeout=cap,
                )
            except subprocess.TimeoutExpired:
                capped = True  # its figure is then an upper bound of its rate
            ended = time.time()
            cpu.stop()
            watch.stop()
            locks_watch.stop()
        name = PEER if delete == "groups" else PEER_BATCH
        outcome = drain_outcome(name, backlog, watch, started, ended, url,
                                locks_watch.first_lock_at, capped)
        outcome.extra.update(load_s=round(seconds_load, 1), sysload_before=load_before,
                             sysload_after=sys_load(), capped_at_s=cap if capped else None,
                             **cpu.to_json(outcome.rows))
        self._drain_cpu(outcome)
        if not capped:
            stats = json.loads((run_dir / "peer.json").read_text())
            outcome.extra.update(phases_s={k: round(v, 2) for k, v in stats["seconds"].items()},
                                 batches=stats["batches"])
        if held_horizon is not None:
            outcome.extra["horizon"] = held_horizon.to_json()
        env.drop_database(url)
        return outcome

    def _peer_cap(self, delete: str, held: bool) -> float | None:
        """Where the plan stops a peer run (a capped run is rated by what it delivered):
        a held horizon's cap, and the one-delete variant's own (a second row, no target)."""
        plan = self.bench.plan
        caps = [float(plan.get("peer_held_cap_s", PEER_HELD_CAP_S))] if held else []
        if delete == "batch" and plan.get("peer_batch_cap_s"):
            caps.append(float(plan["peer_batch_cap_s"]))
        return min(caps, default=None)

    def all(self, workload: str, rows: int, n_topics: int, keys: int, partitions: int,
            deadline_s: float = 60.0, held: bool = False, headers: bool = False,
            payload_bytes: int = 1000) -> list[Outcome]:
        """Every contender on the same backlog shape, alternating, `repeat` runs each."""

        def backlog_for(label: str) -> Backlog:
            topics = self.env.topic_names(label, n_topics)
            self.env.create_topics(topics, partitions)
            return Backlog(rows, tuple(topics), keys, payload_bytes, headers)

        runs: list[tuple[str, Callable[[str], Outcome]]] = [
            (RELAY, lambda label: self.relay(workload, label, backlog_for(label), partitions,
                                             deadline_s, held))]
        runs.append((PEER, lambda label: self.peer(label, backlog_for(label), partitions,
                                                   "groups", held)))
        runs.append((PEER_BATCH, lambda label: self.peer(label, backlog_for(label), partitions,
                                                         "batch", held)))
        results: list[Outcome] = []
        repeat = self.bench.repeat_for(workload)
        # The one-delete peer is a second row, not a target's contender: the plan may give
        # it fewer runs (bench/plan.py).
        caps = [None] * (len(runs) - 1) + [self.bench.plan.get("peer_batch_runs")]
        for i, (rep, (name, run)) in enumerate(alternate(runs, repeat, caps)):
            label = f"{workload.lower()}-{i}"
            log(f"{workload}: {name} on {rows} rows, run {rep + 1} of {repeat}")

            def cleaned(label: str, run: Callable[[str], Outcome] = run) -> Outcome:
                try:
                    return run(label)
                finally:
                    self.env.delete_topics(self.env.topic_names(label, n_topics))

            outcome = self.bench.measured(cleaned, label, rep)
            log(f"{workload}: {name}: {outcome.msgs_per_s:.0f} msg/s over "
                f"{outcome.seconds:.1f} s of drain; start-up {outcome.extra.get('startup_s')} "
                f"s; end to end {outcome.extra.get('end_to_end_msgs_per_s')} msg/s; outside "
                f"CPU {(outcome.extra.get('outside_cpu') or {}).get('outside_cores')} cores")
            results.append(outcome)
        return results

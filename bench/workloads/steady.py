"""Continuous contenders under a generated load (W2, W2C, W5, SOAK): the relay or the
peer runs continuously, a consumer stamps each record's receipt, and latency runs from
a row's created_at to that receipt (bench/workloads/latency.py)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    REPO,
    W2_KEYS,
    W2_TX,
    W2_WARMUP_S,
    in_repo,
    log,
)
from bench.context import Bench
from bench.relay_proc import RelayProcess, last_copy_landed, launch
from bench.workloads.latency import (
    LatencyConsumer,
    Load,
    generate,
    read_generated,
    rounded_percentiles,
)

PROBE_SEQ, WARMUP_SEQ = 3 * 10**12, 2 * 10**12
FIRST_COPY_WAIT_S = 180.0


@dataclass
class Running:
    """A continuous contender and the consumer of its topics."""

    url: str
    topics: list[str]
    run_dir: Path
    consumer: LatencyConsumer
    relay: RelayProcess | None

    def warm_up(self, rate: int, seconds: float = W2_WARMUP_S) -> bool:
        """Start-up is not latency: a first message through, then the same load until the
        JVM is warm and its backlog gone, so the measured window starts steady. For the
        relay, warm includes its first ledger copy: the JVM loads Delta then, once per
        process (about 16 s of work beside the rounds, in-process profile)."""
        topics = tuple(self.topics)
        generate(self.url, Load(100, W2_TX, 0.1, topics, W2_KEYS), self.run_dir / "probe.bin",
                 start_seq=PROBE_SEQ)
        if not self.consumer.wait_for(10, 600):
            raise RuntimeError("nothing arrived within 10 minutes")
        warm = Load(rate, W2_TX, seconds, topics, W2_KEYS)
        n = generate(self.url, warm, self.run_dir / "warmup.bin", start_seq=WARMUP_SEQ)
        copied = self.relay is None or wait_for_first_copy(self.relay.log, FIRST_COPY_WAIT_S)
        if not copied:
            log(f"warm-up: no ledger copy within {FIRST_COPY_WAIT_S:.0f} s")
        return self.consumer.wait_for(10 + n, 300) and copied


def wait_for_first_copy(relay_log: Path, timeout_s: float) -> bool:
    """Whether the relay logs its first copy as in Delta, within `timeout_s`.

    Its commit file is not the end: the copy then reads its batch back from Delta, the
    JVM's first Delta read, and that ran 8 s into the soak's first minute (p99 1.9 s in
    its first 5 s, at 8598a4c) when the warm-up ended at the commit file.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if relay_log.exists() and last_copy_landed(relay_log.read_text(errors="replace")):
            return True
        time.sleep(0.5)
    return False


@contextlib.contextmanager
def running(bench: Bench, workload: str, label: str, peer_runs: bool,
            topics: list[str], partitions: int) -> Iterator[Running]:
    """The relay (or the peer, if `peer_runs`) running on a fresh database;
    the consumer reads `topics`, where the warm-up writes too."""
    env = bench.env
    url = env.fresh_database(label)
    run_dir = env.run_dir(label)
    consumer = LatencyConsumer(env.stack.kafka_bootstrap, topics, partitions,
                               run_dir / "received.bin")
    consumer.start()
    relay: RelayProcess | None = None
    peer: subprocess.Popen[bytes] | None = None
    try:
        if peer_runs:
            peer = subprocess.Popen(
                [sys.executable, "-m", "bench.peer", "--url", url, "--bootstrap",
                 env.stack.kafka_bootstrap, "--stats", str(run_dir / "peer.json")],
                cwd=REPO, start_new_session=True)
        else:
            config = bench.config(workload, url, label)
            relay = launch(config, run_dir)
        yield Running(url, topics, run_dir, consumer, relay)
    finally:
        if relay is not None:
            relay.terminate()
        if peer is not None:
            peer.terminate()
            peer.wait(60)
        consumer.stop()
        env.drop_database(url)


def latencies(receipts: list[tuple[int, float]], generated: dict[int, float]
              ) -> tuple[dict[int, float], int]:
    """Latency of each generated sequence number's first receipt, and the duplicates."""
    out: dict[int, float] = {}
    duplicates = 0
    for seq, at in receipts:
        if seq in generated:
            if seq in out:
                duplicates += 1
                continue
            out[seq] = at - generated[seq]
    return out, duplicates


def latency_extra(values: list[float], generated: int, duplicates: int) -> dict[str, Any]:
    return {
        "latency_s": rounded_percentiles(values),
        "received": len(values), "missing": generated - len(values), "duplicates": duplicates,
    }


def relay_summary(run: Running) -> dict[str, Any]:
    if run.relay is None:
        return {}
    return {**run.relay.summary(), "log": in_repo(run.relay.log)}


def read_latencies(run: Running, name: str) -> tuple[dict[int, float], dict[int, float], int]:
    """(generated seq -> created_at, seq -> latency, duplicates) of `name`.bin."""
    generated = read_generated(run.run_dir / name)
    lat, duplicates = latencies(run.consumer.receipts(), generated)
    return generated, lat, duplicates

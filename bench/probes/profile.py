"""Where a micro-batch's time goes: the relay run in-process with timers around its parts.

The relay's own functions are wrapped at run time (nothing in relay/ changes); every
call is timed with its micro-batch, and Spark's StreamingQueryProgress adds the
engine's side (latestOffset, planning, WAL and commit-log writes). Run it as its own
process so its JVM is private:

    python -m bench.probes.profile --config profile.toml --out timings.json [--available-now]
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from outbox_relay.config.load import load_config

log = logging.getLogger("bench.probes.profile")

_local = threading.local()


class Timings:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[dict[str, float]] = []
        self.current: dict[str, float] | None = None
        self.totals: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self.events: list[tuple[float, str, float]] = []

    def add(self, name: str, seconds: float) -> None:
        with self.lock:
            self.totals[name] += seconds
            self.counts[name] += 1
            self.events.append((time.time(), name, seconds))
            if self.current is not None and threading.current_thread().name != "relay-ledger":
                self.current[name] = self.current.get(name, 0.0) + seconds


TIMINGS = Timings()


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMINGS.add(name, time.perf_counter() - t)

    return wrapper


def _patch_everywhere(module: str, name: str, label: str) -> None:
    """Replace a function in its module and in every relay module that imported it."""
    import importlib
    import sys

    mod = importlib.import_module(module)
    original = getattr(mod, name, None)
    if original is None:
        log.warning("cannot time %s.%s: not found", module, name)
        return
    wrapped = _timed(label, original)
    for other in list(sys.modules.values()):
        mod_name = getattr(other, "__name__", "")
        if mod_name.startswith("relay") and getattr(other, name, None) is original:
            setattr(other, name, wrapped)


def _patch_method(cls: Any, name: str, label: str) -> None:
    setattr(cls, name, _timed(label, getattr(cls, name)))


def instrument() -> None:
    """Wrap the parts of the batch body, the control plane and the ledger copier."""
    from outbox_relay.control import claims, kafka_admin, locks
    from outbox_relay.ledger import delta
    from outbox_relay.stream import batch, runner  # noqa: F401 - loads every module we patch

    _patch_everywhere("outbox_relay.control.pending", "pending_topics", "pending_topics")
    _patch_everywhere("outbox_relay.control.claims", "finish", "finish")
    from outbox_relay.data import plan

    _patch_method(plan.RecordPlan, "records", "record plan (built once, then reused)")
    _patch_everywhere("outbox_relay.data.sink", "write_records", "spark job (read+write)")
    _patch_method(claims.Claims, "claim", "claim")
    _patch_method(locks.TopicLocks, "acquire", "lock")
    _patch_method(kafka_admin.KafkaAdmin, "describe", "kafka describe")
    _patch_method(delta.Ledger, "flush", "ledger flush")
    _patch_everywhere("outbox_relay.data.records", "to_kafka_records",
                      "to_kafka_records (analysis)")
    _patch_everywhere("outbox_relay.data.records", "in_key_order", "in_key_order (analysis)")
    from outbox_relay.stream import delivery

    _patch_method(delivery.Delivery, "deliver", "deliver")
    _patch_method(batch.BatchProcessor, "run_once", "round")
    try:
        from outbox_relay.control import parking

        for name in ("park_doomed", "park_topic"):
            _patch_method(parking.Parking, name, f"parking.{name}")
    except (ImportError, AttributeError) as exc:
        log.warning("cannot time parking: %s", exc)

    original_call = batch.BatchProcessor.__call__

    def call(self: Any, df: Any, batch_id: int) -> None:
        record: dict[str, float] = {"started_at": time.time()}
        TIMINGS.current = record
        t = time.perf_counter()
        try:
            original_call(self, df, batch_id)
        finally:
            record["foreachBatch"] = time.perf_counter() - t
            TIMINGS.current = None
            with TIMINGS.lock:
                TIMINGS.batches.append(record)

    batch.BatchProcessor.__call__ = call  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.probes.profile")
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--available-now", action="store_true")
    p.add_argument("--seconds", type=float, default=0.0, help="continuous: stop after this")
    p.add_argument("--explain", help="EXPLAIN ANALYZE every statement; write them here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    instrument()
    if args.explain:
        from bench.probes import explain

        explain.install()
    from outbox_relay.launch.spark import build_session
    from outbox_relay.stream import query, runner
    from outbox_relay.stream.stop import StopSignal
    from outbox_relay.wiring import build_relay

    config = load_config(args.config)
    t0 = time.perf_counter()
    spark = build_session(config)
    session_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    relay = build_relay(config, spark)
    build_s = time.perf_counter() - t0
    progress: list[dict[str, Any]] = []
    original_start = query.start_query

    def start_query(*a: Any, **k: Any) -> Any:
        q = original_start(*a, **k)
        threading.Thread(target=_collect, args=(q, progress), daemon=True).start()
        return q

    query.start_query = start_query  # type: ignore[assignment]
    stop = StopSignal()
    stop.install()  # the bench ends a continuous profile with SIGTERM
    if args.seconds:
        threading.Timer(args.seconds, lambda: stop.request("profile time is up")).start()
    t1 = time.perf_counter()
    run_started_at = time.time()
    result = runner.run(relay, args.available_now, stop)
    run_s = time.perf_counter() - t1
    relay.close()
    out = {
        "session_s": session_s,
        "build_relay_s": build_s,
        "run_started_at": run_started_at,
        "run_s": run_s,
        "exit_code": result.exit_code,
        "published": sum(result.stats.published.values()),
        "batches": TIMINGS.batches,
        "totals": dict(TIMINGS.totals),
        "counts": dict(TIMINGS.counts),
        # Every timed call as (epoch, name, seconds): rounds inside one micro-batch apart.
        "events": [[round(t, 3), name, round(sec, 4)] for t, name, sec in TIMINGS.events],
        "progress": progress,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, default=str)
    if args.explain:
        explain.write(args.explain)
    spark.stop()
    return 0


def _collect(query: Any, sink: list[dict[str, Any]]) -> None:
    seen: set[str] = set()
    while True:
        try:
            for p in query.recentProgress:
                key = f"{p.batchId}:{p.timestamp}"
                if key not in seen:
                    seen.add(key)
                    sink.append({"batchId": p.batchId, "timestamp": p.timestamp,
                                 "durationMs": dict(p.durationMs)})
            if not query.isActive:
                return
        except Exception:
            return
        time.sleep(0.5)


if __name__ == "__main__":
    raise SystemExit(main())

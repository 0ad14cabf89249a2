"""EXPLAIN ANALYZE of every control-plane statement the relay runs, captured in place.

Installed in an in-process relay (``python -m bench.probes.profile --explain FILE``), the
cursor below runs ``EXPLAIN (ANALYZE, BUFFERS)`` of each statement inside a savepoint,
rolls the savepoint back, and then runs the statement for real. So every plan is the
one the relay got, with its real parameters, on the real data of that moment (dead
index entries of earlier batches included), whatever the current SQL text is. After
each claim it also explains the executors' JDBC read of that batch (the whole batch
and the first of two key-hash partitions, as Spark splits it).

The doubled work makes this run slower: its timings are not the benchmark's.
"""

from __future__ import annotations

import importlib
import json
import re
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import psycopg2.extras

_MODULES = (
    "outbox_relay.control.claims",
    "outbox_relay.control.locks",
    "outbox_relay.control.pending",
    "outbox_relay.control.parking",
    "outbox_relay.ledger.staging",
)
_EXPLAINABLE = re.compile(r"^\s*(WITH|SELECT|INSERT|UPDATE|DELETE)\b", re.I | re.S)
_SKIP = re.compile(r"pg_(try_)?advisory|^\s*SELECT\s+1\s*$", re.I)
_EXEC_TIME = re.compile(r"Execution Time: ([\d.]+) ms")
# Spark's JDBC reader with numPartitions=2 over key_hash: the first partition's filter.
JDBC_READ = "SELECT * FROM relay_claimed_messages WHERE batch_id = %s"
JDBC_READ_PART = JDBC_READ + ' AND ("key_hash" < 0 OR "key_hash" IS NULL)'


def statement_names() -> dict[str, str]:
    """SQL text -> 'module.NAME' for the statements the relay's modules define."""
    names: dict[str, str] = {}
    for module in _MODULES:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        for attr, value in vars(mod).items():
            if attr.isupper() and isinstance(value, str) and _EXPLAINABLE.match(value):
                names.setdefault(value.strip(), f"{module.rsplit('.', 1)[1]}.{attr}")
    return names


@dataclass
class Captured:
    name: str
    calls: int = 0
    real_ms: list[float] = field(default_factory=list)
    explain_ms: list[float] = field(default_factory=list)
    plans: list[tuple[float, str]] = field(default_factory=list)  # (explain ms, text)


class Capture:
    def __init__(self) -> None:
        self.names = statement_names()
        self.by_name: dict[str, Captured] = {}
        self.order: list[str] = []
        self.counts: dict[str, int] = defaultdict(int)

    def name_of(self, statement: str) -> str:
        text = statement.strip()
        if text in self.names:
            return self.names[text]
        first = " ".join(text.split())[:60]
        return f"other: {first}"

    def record(self, name: str, explain_ms: float | None, plan: str | None,
               real_ms: float) -> None:
        entry = self.by_name.get(name)
        if entry is None:
            entry = self.by_name[name] = Captured(name)
            self.order.append(name)
        entry.calls += 1
        entry.real_ms.append(real_ms)
        if explain_ms is not None and plan is not None:
            entry.explain_ms.append(explain_ms)
            # Keep the first three plans and the slowest one.
            if len(entry.plans) < 3:
                entry.plans.append((explain_ms, plan))
            elif explain_ms > max(p[0] for p in entry.plans[3:] or [(-1.0, "")]):
                entry.plans = [*entry.plans[:3], (explain_ms, plan)]

    def to_json(self) -> list[dict[str, Any]]:
        out = []
        for name in self.order:
            e = self.by_name[name]
            out.append({
                "statement": e.name,
                "calls": e.calls,
                "real_ms_median": round(statistics.median(e.real_ms), 2),
                "real_ms_max": round(max(e.real_ms), 2),
                "real_ms_total": round(sum(e.real_ms), 1),
                "explain_ms_median": round(statistics.median(e.explain_ms), 2)
                if e.explain_ms else None,
                "plans": [{"execution_ms": ms, "plan": text} for ms, text in e.plans],
            })
        return out


CAPTURE = Capture()


_BASE: Any = psycopg2.extras.RealDictCursor


class ExplainingCursor(_BASE):  # type: ignore[misc]
    """A RealDictCursor that explains each statement in a savepoint before running it."""

    def execute(self, query: Any, vars: Any = None) -> Any:
        text = query if isinstance(query, str) else str(query)
        if not _EXPLAINABLE.match(text) or _SKIP.search(text):
            return super().execute(query, vars)
        name = CAPTURE.name_of(text)
        explain_ms, plan = self._explain(text, vars)
        t = time.perf_counter()
        result = super().execute(query, vars)
        CAPTURE.record(name, explain_ms, plan, (time.perf_counter() - t) * 1000)
        if "INSERT INTO relay_sessions" in text:
            self._explain_read()
        return result

    def _explain(self, text: str, vars: Any) -> tuple[float | None, str | None]:
        run = _BASE.execute
        try:
            run(self, "SAVEPOINT bench_explain")
            run(self, "EXPLAIN (ANALYZE, BUFFERS) " + text, vars)
            rows = [next(iter(r.values())) for r in self.fetchall()]
            run(self, "ROLLBACK TO SAVEPOINT bench_explain")
            run(self, "RELEASE SAVEPOINT bench_explain")
        except psycopg2.Error as exc:
            run(self, "ROLLBACK TO SAVEPOINT bench_explain")
            return None, f"EXPLAIN failed: {exc}"
        plan = "\n".join(rows)
        m = _EXEC_TIME.search(plan)
        return (float(m[1]) if m else None), plan

    def _explain_read(self) -> None:
        """The executors' read of the claimed batch, explained right after the claim, on a
        cursor of its own (this one still holds the claim's result for the relay)."""
        with self.connection.cursor(cursor_factory=_BASE) as cur:
            cur.execute("SELECT max(batch_id) AS b FROM relay_sessions")
            row = cur.fetchone()
            if not row or row["b"] is None:
                return
            for name, sql in (("jdbc read: whole batch", JDBC_READ),
                              ("jdbc read: one of 2 partitions", JDBC_READ_PART)):
                explain_ms, plan = ExplainingCursor._explain(cur, sql, (row["b"],))
                CAPTURE.record(name, explain_ms, plan, 0.0)


def install() -> None:
    """Make the relay's control-plane connections explain everything they run."""
    psycopg2.extras.RealDictCursor = ExplainingCursor


def write(path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(CAPTURE.to_json(), f, indent=1)

"""The control plane's own statements (outbox_relay.control.claims.CLAIM, finish.FINISH_SESSIONS,
the locks), measured round by round on W1's and W3's shapes.

Each variant gets its own database with the same backlog and runs the relay's loop by
hand: lock every topic, claim, the executors' read, finish, release, round after round
until the outbox is empty, each statement under EXPLAIN (ANALYZE, BUFFERS) (which
executes it), committed like the relay commits it. The statements are imported, never
copied: a change to them is measured on a branch that holds it, against main.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from bench.backlog import Backlog, load
from bench.env import BenchEnv, connect
from outbox_relay.control import claims, finish, locks

TOKEN = "bench-sql"
PREFIX = "outbox-relay."

_TIME = re.compile(r"Execution Time: ([\d.]+) ms")
_BUFFERS = re.compile(r"Buffers: (.*)")


@dataclass
class Step:
    statement: str
    ms: float
    rows: int | None
    buffers: str
    plan: str


@dataclass
class VariantRun:
    variant: str
    shape: str
    rounds: list[list[Step]] = field(default_factory=list)
    error: str | None = None
    total_ms: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "shape": self.shape,
            "error": self.error,
            "total_ms": {k: round(v, 1) for k, v in self.total_ms.items()},
            "rounds": [[{"statement": s.statement, "ms": round(s.ms, 1), "buffers": s.buffers}
                        for s in r] for r in self.rounds],
            "plans": {s.statement: s.plan for s in (self.rounds[0] if self.rounds else [])},
        }


def _explain(cur: Any, sql: str, params: Any) -> tuple[float, str]:
    cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
    plan = "\n".join(r[0] for r in cur.fetchall())
    m = _TIME.search(plan)
    return (float(m[1]) if m else float("nan")), plan


def run_variant(url: str, backlog: Backlog, limit: int, claim_sql: str, finish_sql: str,
                variant: str, shape: str, max_rounds: int = 50,
                work_mem: str | None = None) -> VariantRun:
    out = VariantRun(variant, shape)
    conn = connect(url, autocommit=False)
    if work_mem:
        with conn.cursor() as cur:
            cur.execute("SET work_mem = %s", (work_mem,))
        conn.commit()
    topics = list(backlog.topics)
    claim_params = {"topics": topics, "max_bytes": [1_048_576 - 512] * len(topics),
                    "key_required": [False] * len(topics), "compact": [False] * len(topics),
                    "token": TOKEN, "lock_timeout_s": 60, "prefix": PREFIX, "limit": limit,
                    "batch_bytes": 256 * 1024 * 1024, "source": "bench"}
    try:
        with conn.cursor() as cur:
            for _ in range(max_rounds):
                steps: list[Step] = []
                cur.execute(locks.ENSURE_TOPICS, (topics,))
                cur.execute(locks.LOCK_TOPICS, {"token": TOKEN, "topics": topics,
                                                "lock_timeout_s": 60})
                conn.commit()
                ms, plan = _explain(cur, claim_sql, claim_params)
                conn.commit()
                cur.execute("SELECT session_id::text, batch_id, cardinality(ids) "
                            "FROM relay_sessions WHERE lock_token = %s", (TOKEN,))
                sessions = cur.fetchall()
                claimed = sum(r[2] for r in sessions)
                steps.append(Step("claim", ms, claimed, _first_buffers(plan), plan))
                if not sessions:
                    conn.commit()
                    break
                ms, plan = _explain(cur, "SELECT * FROM relay_claimed_messages WHERE batch_id = %s",
                                    (sessions[0][1],))
                steps.append(Step("jdbc read (whole batch)", ms, claimed, _first_buffers(plan),
                                  plan))
                conn.commit()
                cur.execute(locks.HOLD_OWNED, {"topics": topics, "token": TOKEN,
                                               "lock_timeout_s": 60})
                ms, plan = _explain(cur, finish_sql, {
                    "sessions": [r[0] for r in sessions], "owned": topics, "token": TOKEN,
                    "source": "bench"})
                cur.execute(finish.ABANDON_OWN_SESSIONS, (topics, TOKEN))
                cur.execute(locks.RELEASE, (topics, TOKEN))
                conn.commit()
                steps.append(Step("finish", ms, claimed, _first_buffers(plan), plan))
                out.rounds.append(steps)
    except Exception as exc:
        conn.rollback()
        out.error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    finally:
        conn.close()
    for r in out.rounds:
        for s in r:
            out.total_ms[s.statement] = out.total_ms.get(s.statement, 0.0) + s.ms
    return out


def _first_buffers(plan: str) -> str:
    m = _BUFFERS.search(plan)
    return m[1] if m else ""


def compare(env: BenchEnv, rows: int, n_topics: int, keys: int, limit: int,
            shape: str) -> list[VariantRun]:
    """The relay's statements, with the server's work_mem and with 64MB, each on a fresh
    copy of one backlog."""
    variants: list[tuple[str, str, str, str | None]] = [
        ("claim + finish", claims.CLAIM, finish.FINISH_SESSIONS, None),
        ("claim + finish, work_mem 64MB", claims.CLAIM, finish.FINISH_SESSIONS, "64MB"),
    ]
    results = []
    for i, (name, claim_sql, finish_sql, work_mem) in enumerate(variants):
        label = f"sql-{shape}-{i}"
        topics = tuple(env.topic_names(label, n_topics))
        url = env.fresh_database(label)
        load(url, Backlog(rows, topics, keys))
        started = time.monotonic()
        run = run_variant(url, Backlog(rows, topics, keys), limit, claim_sql, finish_sql,
                          name, shape, work_mem=work_mem)
        run.total_ms["wall"] = (time.monotonic() - started) * 1000
        env.drop_database(url)
        results.append(run)
    return results

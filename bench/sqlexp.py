"""Proposed control-plane SQL, measured against the current statements on the same data.

claims.py belongs to another engineer; these are proposals, measured here so the report
can show their numbers. Each variant gets its own database with the same backlog and
runs the relay's loop by hand: lock every topic, claim, the executors' read, finish,
release, round after round until the outbox is empty, each statement under
EXPLAIN (ANALYZE, BUFFERS) (which executes it), committed like the relay commits it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from bench.backlog import Backlog, load
from bench.env import BenchEnv, connect
from relay.control import claims, finish, locks

TOKEN = "bench-sql"
PREFIX = "outbox-relay."

# The proposed claim: one pass in id order over every locked topic, instead of one
# index scan per topic. In an outbox the topics interleave on the heap, so a scan per
# topic reads each heap page once per topic; one pass reads it once. Each topic still
# gets a prefix of its remaining ids (the lowest ones), so order and late commits are
# handled exactly as before; a topic may get fewer than `limit` rows when others fill
# the window. Size and problem are computed before the window sort, so the payloads
# never reach a sort. relay_message_problem (an index probe of the parked table per
# row, 3.2 s of a 5 s claim of 250k rows) runs only for rows that can have a problem:
# over the size limit, with headers, or in a topic that has parked messages at all.
# That is the function's own condition, so the result is the same. The topic filter is
# the statement's constant array, which PostgreSQL hashes (an InitPlan array, or IN
# (SELECT ...), was searched linearly per row or turned the plan into a sort of the
# whole table: 40 s for 1,000 topics). Everything after `candidate` is the current
# statement.
PROPOSED_CANDIDATE = """
spec AS (
    SELECT s.topic, s.max_bytes, s.key_required, s.compact,
           EXISTS (SELECT 1 FROM relay_parked_messages p WHERE p.topic = s.topic) AS any_parked
    FROM unnest(%(topics)s::varchar[], %(max_bytes)s::bigint[], %(key_required)s::bool[],
                %(compact)s::bool[])
        AS s(topic, max_bytes, key_required, compact)
    JOIN kafka_topic_info i ON i.topic = s.topic AND i.locked_by = %(token)s
),
scan AS MATERIALIZED (
    SELECT s.topic, s.compact, w.id, w.key, w.size,
           CASE WHEN w.size > s.max_bytes OR w.headers IS NOT NULL OR s.any_parked
                     OR (s.key_required AND w.key IS NULL)
                THEN relay_message_problem(w.id, s.topic, w.message, w.key, w.partition_key,
                                           w.headers, s.max_bytes, %(prefix)s, s.key_required)
           END AS problem
    FROM (
        SELECT m.id, m.topic, m.key, m.message, m.partition_key, m.headers,
               coalesce(octet_length(m.message), 0) + coalesce(octet_length(m.key), 0)
               + coalesce(octet_length(m.headers::text), 0) AS size
        FROM kafka_messages m
        WHERE m.topic = ANY(%(topics)s::varchar[])
        ORDER BY m.id
        LIMIT %(limit)s * (SELECT count(*) FROM spec)
    ) w
    JOIN spec s ON s.topic = w.topic
),
candidate AS (
    SELECT topic, compact, id, key, size, problem FROM (
        SELECT c.*, row_number() OVER (PARTITION BY c.topic ORDER BY c.id) AS rn FROM scan c
    ) x
    WHERE rn <= %(limit)s
),
"""


def proposed_claim() -> str | None:
    """The current CLAIM with its spec/candidate CTEs replaced, or None if it changed shape."""
    current = claims.CLAIM
    start = current.find("spec AS (")
    end = current.find("first_problem AS (")
    if start < 0 or end < 0:
        return None
    return current[:start] + PROPOSED_CANDIDATE.strip() + "\n" + current[end:]


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
                    "batch_bytes": 256 * 1024 * 1024}
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
    """The current and the proposed statements, each on a fresh copy of one backlog."""
    variants: list[tuple[str, str | None, str | None, str | None]] = [
        ("current claim + finish", claims.CLAIM, finish.FINISH_SESSIONS, None),
        ("one-pass claim (proposed) + finish", proposed_claim(), finish.FINISH_SESSIONS, None),
        ("one-pass claim (proposed) + finish, work_mem 64MB", proposed_claim(),
         finish.FINISH_SESSIONS, "64MB"),
    ]
    results = []
    for i, (name, claim_sql, finish_sql, work_mem) in enumerate(variants):
        label = f"sql-{shape}-{i}"
        if claim_sql is None or finish_sql is None:
            results.append(VariantRun(name, shape, error="statement changed shape; "
                                                         "proposal not applicable"))
            continue
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

"""A held horizon, on purpose (issue 10): one session holds an xid in an open transaction
for a whole run, as any long transaction of an application does in production.

PostgreSQL then cannot remove the outbox's deleted rows, so a claim that walks the id
index in order steps over every dead entry it has left behind (docs/design.md, invariant
5). The session starts before the backlog is written and ends after the contender; its
`backend_xid` and `backend_xmin` are sampled to show that the horizon was held.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

import psycopg2.extensions

from bench.env import connect

HOLD = "SELECT pg_current_xact_id()::text"
STATE = """
SELECT backend_xid::text AS xid, backend_xmin::text AS xmin, state,
       round(extract(epoch FROM clock_timestamp() - xact_start)::numeric, 1) AS open_s
FROM pg_stat_activity WHERE pid = %s
"""


class HeldHorizon:
    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: psycopg2.extensions.connection | None = None
        self.xid: str | None = None
        self.samples: list[dict[str, Any]] = []

    def __enter__(self) -> HeldHorizon:
        self._conn = connect(self._url, autocommit=False)
        with self._conn.cursor() as cur:
            cur.execute(HOLD)
            row = cur.fetchone()
        self.xid = row[0] if row else None
        self.sample("start")
        return self

    def sample(self, when: str) -> None:
        """Where the holding session stands, read from another connection."""
        assert self._conn is not None
        with connect(self._url) as probe, probe.cursor() as cur:
            cur.execute(STATE, (self._conn.get_backend_pid(),))
            row = cur.fetchone()
        probe.close()
        names = ("backend_xid", "backend_xmin", "state", "open_s")
        state = dict(zip(names, row, strict=True)) if row else {}
        self.samples.append({"when": when, "at": round(time.time(), 1), **state,
                             "open_s": float(state.get("open_s") or 0)})

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._conn is None:
            return
        try:
            self.sample("end")
        finally:
            self._conn.rollback()
            self._conn.close()
            self._conn = None

    def to_json(self) -> dict[str, Any]:
        held = bool(self.samples) and all(s.get("backend_xid") == self.xid for s in self.samples)
        return {"xid": self.xid, "held_throughout": held, "samples": self.samples}

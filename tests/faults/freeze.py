"""Freezing a relay (SIGSTOP) while one of its sessions is in flight: scenarios 5, 12 and 13.

A session can be short: the driver's producer sends a claim of 3,000 rows in a fraction
of a second. So the freeze is tried again and again, on a fresh session each time, and
checked afterwards: a relay that ended its session before the signal landed is resumed
and another session is sought.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import NamedTuple

from tests.faults.infra import query, wait_until
from tests.faults.outbox_writer import Refill
from tests.faults.relay_proc import RelayProc

TRIES = 20


class Frozen(NamedTuple):
    """The relay frozen, and the session it was frozen in."""

    name: str
    token: str
    session: str
    ids: list[int]
    phase: str  # "mid-write" when its records were seen landing, else "in flight"
    at: float  # time.monotonic() when the signal was sent


def _session_of(url: str, prefixes: dict[str, str]) -> tuple[str, str, str, list[int]] | None:
    """A session in flight now, with the topic lock still its token's: (relay name,
    token, session id, ids)."""
    rows = query(url, "SELECT s.lock_token, s.session_id::text, s.ids FROM relay_sessions s "
                 "JOIN kafka_topic_info i ON i.topic = s.topic AND i.locked_by = s.lock_token")
    for token, session, ids in rows:
        for name, prefix in prefixes.items():
            if token.startswith(prefix):
                return name, token, session, ids
    return None


def _alive(url: str, session: str) -> bool:
    return bool(query(url, "SELECT 1 FROM relay_sessions WHERE session_id = %s::uuid",
                      (session,)))


def _seen_landing(url: str, session: str, landed: Callable[[], int]) -> bool:
    """Whether records landed in Kafka while `session` was still in flight: then only
    its relay can be writing them."""
    base = landed()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and _alive(url, session):
        if landed() > base:
            return True
        time.sleep(0.02)
    return False


def freeze_in_flight(url: str, prefixes: dict[str, str], procs: dict[str, RelayProc],
                     refill: Refill, *, landed: Callable[[], int] | None = None,
                     mid_write_tries: int = 0) -> Frozen:
    """SIGSTOPs a relay whose session is in flight. With `landed` (how many records the
    topics hold), the first `mid_write_tries` freeze only a relay whose records are seen
    landing; later tries freeze at first sight. `refill` writes more when the relays
    drained the outbox meanwhile."""
    found: list[tuple[str, str, str, list[int]]] = []

    def in_flight() -> bool:
        got = _session_of(url, prefixes)
        if got:
            found.append(got)
        else:
            refill()
        return got is not None

    for attempt in range(TRIES):
        found.clear()
        wait_until(in_flight, 600, "a session in flight", interval_s=0.02,
                   diagnose=lambda: "\n".join(p.tail(15) for p in procs.values()))
        name, token, session, ids = found[0]
        phase = "in flight"
        if landed is not None and attempt < mid_write_tries:
            if not _seen_landing(url, session, landed):
                continue
            phase = "mid-write"
        procs[name].signal(signal.SIGSTOP)
        at = time.monotonic()
        if _alive(url, session):
            return Frozen(name, token, session, ids, phase, at)
        procs[name].signal(signal.SIGCONT)  # it finished before the signal landed
    raise AssertionError(f"never froze a relay with a session in flight in {TRIES} tries")

"""Failpoints that only tests turn on, to break the relay at a precise moment.

RELAY_FAILPOINTS holds comma-separated names. A crash point (`hit`) reached while set
kills the whole process group with SIGKILL (the JVM included), as a power cut would.
A fault switch (`armed`) makes the relay see the world as a race would show it:

- ``after_ack`` (crash): between Kafka's acknowledgement and the delete's commit;
- ``stale_topic_config`` (switch): topic configs read before the topic turned compacted,
  so only the broker refuses a keyless record there;
- ``stale_max_message_bytes`` (switch): topic configs read before the topic's
  max.message.bytes was lowered: the relay takes the producer's max.request.size for the
  topic's limit, so only the broker refuses a record over the topic's real one;
- ``second_bridge_round_db_error`` (switch): the second round a continuous relay runs
  before its query's first batch body takes over (outbox_relay.stream.starting) meets a real
  database error, as a failing server would raise it, once that body waits behind it.

A hold point (`hold`) reached while set and while the file named by RELAY_FAILPOINT_HOLD
exists logs one line and waits until that file is gone, so a test can act while the relay
is at that point:

- ``ledger_copy_held`` (hold): a ledger copy batch is tagged, about to be written to Delta;
- ``first_bridge_round`` (hold): the first round a continuous relay runs before its
  query's first batch body takes over is about to start.

A switch may `trip` a one-shot fault that code further on `take`s, for a fault that must
happen in one place (a round) at a moment another one decides (the second bridge round).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

ENV = "RELAY_FAILPOINTS"
HOLD_ENV = "RELAY_FAILPOINT_HOLD"
_HOLD_POLL_S = 0.05

log = logging.getLogger(__name__)

# What a tripped `round_db_error` runs: PostgreSQL itself refuses it, so the error comes
# through the driver and the relay's translation of its errors like any other.
DB_ERROR = "DO $$ BEGIN RAISE EXCEPTION 'failpoint: a database error in a round'; END $$"

_tripped: set[str] = set()


def armed(name: str) -> bool:
    return name in os.environ.get(ENV, "").split(",")


def hit(name: str) -> None:
    if armed(name):
        os.killpg(os.getpgrp(), signal.SIGKILL)


def hold(name: str) -> None:
    if not armed(name):
        return
    held = Path(os.environ[HOLD_ENV])
    if held.exists():
        log.warning("failpoint %s: held while %s exists", name, held)
    while held.exists():
        time.sleep(_HOLD_POLL_S)


def trip(name: str) -> None:
    """Arms the one-shot fault `name` in this process (see `take`)."""
    _tripped.add(name)


def take(name: str) -> bool:
    """Whether the one-shot fault `name` was tripped; it fires once."""
    if name not in _tripped:
        return False
    _tripped.discard(name)
    return True


def raise_db_error(name: str, execute: Callable[[str], object]) -> None:
    """Fires `name` now: `execute` (a Database's) runs DB_ERROR, which PostgreSQL refuses."""
    log.warning("failpoint %s: firing", name)
    execute(DB_ERROR)


def until(condition: Callable[[], bool], timeout_s: float = 120.0) -> None:
    """Waits for `condition`, at most `timeout_s`: a fault that must land at a moment."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(_HOLD_POLL_S)

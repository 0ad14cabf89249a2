"""Failpoints that only tests turn on, to break the relay at a precise moment.

RELAY_FAILPOINTS holds comma-separated names. A crash point (`hit`) reached while set
kills the whole process group with SIGKILL (the JVM included), as a power cut would.
A fault switch (`armed`) makes the relay see the world as a race would show it:

- ``after_ack`` (crash): between Kafka's acknowledgement and the delete's commit;
- ``stale_topic_config`` (switch): topic configs read before the topic turned compacted,
  so only the broker refuses a keyless record there.

A hold point (`hold`) reached while set and while the file named by RELAY_FAILPOINT_HOLD
exists logs one line and waits until that file is gone, so a test can act while the relay
is at that point:

- ``ledger_copy_held`` (hold): a ledger copy batch is tagged, about to be written to Delta.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

ENV = "RELAY_FAILPOINTS"
HOLD_ENV = "RELAY_FAILPOINT_HOLD"
_HOLD_POLL_S = 0.05

log = logging.getLogger(__name__)


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

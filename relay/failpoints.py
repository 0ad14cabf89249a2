"""Failpoints that only tests turn on, to break the relay at a precise moment.

RELAY_FAILPOINTS holds comma-separated names. A crash point (`hit`) reached while set
kills the whole process group with SIGKILL (the JVM included), as a power cut would.
A fault switch (`armed`) makes the relay see the world as a race would show it:

- ``after_ack`` (crash): between Kafka's acknowledgement and the delete's commit;
- ``stale_topic_config`` (switch): topic configs read before the topic turned compacted,
  so only the broker refuses a keyless record there.

A hold point (`hold`) reached while set logs one line and waits until the file named by
RELAY_FAILPOINT_RELEASE exists, so a test can act while the relay is at that point:

- ``ledger_copy_held`` (hold): a ledger copy batch is tagged, about to be written to Delta.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

ENV = "RELAY_FAILPOINTS"
RELEASE_ENV = "RELAY_FAILPOINT_RELEASE"
_HOLD_POLL_S = 0.05

log = logging.getLogger(__name__)


def armed(name: str) -> bool:
    return name in os.environ.get(ENV, "").split(",")


def hit(name: str) -> None:
    if armed(name):
        os.killpg(os.getpgrp(), signal.SIGKILL)


def hold(name: str) -> None:
    if armed(name):
        release = Path(os.environ[RELEASE_ENV])
        log.warning("failpoint %s: held until %s exists", name, release)
        while not release.exists():
            time.sleep(_HOLD_POLL_S)

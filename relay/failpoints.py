"""Failpoints that only tests turn on, to crash the relay at a precise moment.

RELAY_FAILPOINTS holds comma-separated names; a name reached while set kills the
whole process group with SIGKILL (the JVM included), as a power cut would.
"""

from __future__ import annotations

import os
import signal

ENV = "RELAY_FAILPOINTS"


def hit(name: str) -> None:
    armed = os.environ.get(ENV, "")
    if armed and name in armed.split(","):
        os.killpg(os.getpgrp(), signal.SIGKILL)

"""Failpoints that only tests turn on, to break the relay at a precise moment.

RELAY_FAILPOINTS holds comma-separated names. A crash point (`hit`) reached while set
kills the whole process group with SIGKILL (the JVM included), as a power cut would.
A fault switch (`armed`) makes the relay see the world as a race would show it:

- ``after_ack`` (crash): between Kafka's acknowledgement and the delete's commit;
- ``stale_topic_config`` (switch): topic configs read before the topic turned compacted,
  so only the broker refuses a keyless record there.
"""

from __future__ import annotations

import os
import signal

ENV = "RELAY_FAILPOINTS"


def armed(name: str) -> bool:
    return name in os.environ.get(ENV, "").split(",")


def hit(name: str) -> None:
    if armed(name):
        os.killpg(os.getpgrp(), signal.SIGKILL)

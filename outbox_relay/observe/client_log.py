"""Where librdkafka's log lines go (the driver's admin client and producer): Python
logging, not raw stderr."""

from __future__ import annotations

import logging
import re

_client_log = logging.getLogger("outbox_relay.librdkafka")


class ClientLog:
    """Where a client's librdkafka log lines go: Python logging, not raw stderr.

    While no broker answers, librdkafka logs a failed connect (facility FAIL) about 20
    times a second, so a preflight against a closed port printed some 60 lines before
    its own one. Those lines go to the ``outbox_relay.librdkafka`` logger at DEBUG (the relay
    reports the outage itself) and the latest is kept for that report; every other line
    keeps its level. librdkafka queues them until the client is polled.
    """

    _THREAD = re.compile(r"^\[thrd:[^\]]*\]:\s*")
    # Configuration warnings about settings the relay makes on purpose: librdkafka calls
    # the gap-less guarantee experimental at every start (outbox_relay.direct.producer).
    _CHOSEN = ("enable.gapless.guarantee",)

    def __init__(self) -> None:
        self.last_failure: str | None = None

    def log(self, level: int, fmt: str, *args: object) -> None:
        facility = args[0] if args else ""
        if facility == "FAIL":
            self.last_failure = self._THREAD.sub("", str(args[-1]))
            level = logging.DEBUG
        elif facility == "CONFWARN" and any(c in str(args[-1]) for c in self._CHOSEN):
            level = logging.DEBUG
        _client_log.log(level, fmt, *args)

"""One database's relay in a relay of several (outbox_relay.stream.many): built, run and,
when it cannot be reached or its run fails, tried again, in a thread of its own."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from outbox_relay.config import Config
from outbox_relay.control.idle_watch import IdleWatch
from outbox_relay.control.migrate import check_schema
from outbox_relay.errors import RelayError, exit_code_for, first_line
from outbox_relay.exit_codes import ExitCode
from outbox_relay.launch.session import SparkSource
from outbox_relay.ledger.flusher import DrainCopiers
from outbox_relay.observe.databases import DatabaseMetrics
from outbox_relay.stream.runner import RunResult, run_relay
from outbox_relay.stream.stats import RelayStats
from outbox_relay.stream.stop import StopSignal
from outbox_relay.wiring import Relay

log = logging.getLogger(__name__)

# A drain's attempts at a database it cannot reach, before it counts as unreachable.
DRAIN_ATTEMPTS = 3


@dataclass
class DatabaseOutcome:
    """How one database's relay ended: its last run's result, or the error that kept it
    from running (unreachable, not migrated)."""

    name: str
    result: RunResult | None = None
    error: BaseException | None = None

    @property
    def exit_code(self) -> int:
        if self.result is not None:
            return self.result.exit_code
        assert self.error is not None
        return exit_code_for(self.error)


class DatabaseRun:
    def __init__(self, name: str, config: Config, available_now: bool, stop: StopSignal,
                 source: SparkSource, started: float | None,
                 build: Callable[[Config], Relay], metrics: DatabaseMetrics,
                 watch: IdleWatch | None = None, copiers: DrainCopiers | None = None) -> None:
        self.name = name
        self.config = config
        self.available_now = available_now
        self.stop = stop
        self.source = source
        self.started = started
        self.build = build
        self.metrics = metrics
        self.watch = watch
        self.copiers = copiers
        self.outcome = DatabaseOutcome(name)
        self.thread = threading.Thread(target=self.run, name=f"relay-db-{name}", daemon=True)

    def run(self) -> None:
        settings = self.config.relay
        pause = settings.backoff_base_s
        attempts = 0
        while not self.stop.requested:
            attempts += 1
            try:
                self.outcome = DatabaseOutcome(self.name, result=self._once())
            except Exception as exc:  # this database's alone: the others relay on
                self.outcome = DatabaseOutcome(self.name, error=exc)
                if not isinstance(exc, RelayError):
                    log.exception("database %s: the relay failed", self.name)
            if self.outcome.error is None:
                assert self.outcome.result is not None
                if self.available_now or self.outcome.result.exit_code == ExitCode.OK:
                    return  # drained, or stopped
                attempts, pause = 0, settings.backoff_base_s  # it had run: start over
            if self.available_now and attempts >= DRAIN_ATTEMPTS:
                return
            why = (first_line(self.outcome.error) if self.outcome.error is not None
                   else f"its run ended with exit code {self.outcome.exit_code}")
            wait = min(pause, 1.0) if self.available_now else pause
            log.warning("database %s: %s; trying it again in %.1f s", self.name, why, wait)
            if self.stop.wait(wait):
                return
            pause = min(pause * 2, settings.backoff_max_s)

    def _once(self) -> RunResult:
        check_schema(self.config.postgres)
        relay = self.build(self.config)
        self.metrics.add(self.name, relay.metrics.registry)
        try:
            if self.stop.requested:
                return RunResult(ExitCode.INTERRUPTED if self.available_now else ExitCode.OK,
                                 RelayStats(), 0.0, [])
            return run_relay(relay, self.available_now, self.stop, None, self.source,
                             self.started, lazy=True, watch=self.watch,
                             copiers=self.copiers)
        finally:
            relay.close()

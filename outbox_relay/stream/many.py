"""A relay of several outbox databases in one process (`[[databases]]`).

Each database has the whole control plane of a relay of one (outbox_relay.wiring's
Relay: its connections, tokens, locks, claims, ledger and liveness) and runs as one does
(outbox_relay.stream.runner), in a thread of its own: its rounds go through the driver's
producer from the start, and its backlogs through Spark's executors once the one session
all of them share is up (each database's streaming query is its own, in that session).

Isolation: a database's failure stops its own relay only (a child StopSignal each). A
continuous relay tries a database it cannot reach, or whose run failed, again after a
backoff, while the others relay on; a drain drains every database it reaches, and its
exit code is that of the worst outcome among them (outbox_relay.exit_codes), so a
database it could not reach makes the drain fail even when the others drained.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from outbox_relay.config import Config
from outbox_relay.control.migrate import check_schema
from outbox_relay.errors import RelayError, exit_code_for, first_line
from outbox_relay.exit_codes import ExitCode, Outcome, outcome_of
from outbox_relay.launch.session import SparkSource
from outbox_relay.observe.databases import DatabaseMetrics
from outbox_relay.observe.serve import exported
from outbox_relay.stream.runner import RunResult, run_relay
from outbox_relay.stream.stats import RelayStats
from outbox_relay.stream.stop import StopSignal
from outbox_relay.wiring import Relay, build_relay

log = logging.getLogger(__name__)

# A drain's attempts at a database it cannot reach, before it counts as unreachable.
_DRAIN_ATTEMPTS = 3
_SEVERITY = (Outcome.SUCCESS, Outcome.WARN, Outcome.RETRY, Outcome.FAIL)


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


@dataclass
class ManyResult:
    outcomes: list[DatabaseOutcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        """The code of the worst outcome; of two alike, the first database's."""
        code: int = ExitCode.OK
        for outcome in self.outcomes:
            if (_SEVERITY.index(outcome_of(outcome.exit_code))
                    > _SEVERITY.index(outcome_of(code))):
                code = outcome.exit_code
        return code


def run_many(config: Config, available_now: bool, stop: StopSignal, source: SparkSource,
             started: float | None = None,
             build: Callable[[Config], Relay] = lambda c: build_relay(c, None)) -> ManyResult:
    """Relays every database of `config` until each drained (available-now) or `stop`."""
    began = time.monotonic()
    metrics = DatabaseMetrics(config.metrics.max_label_databases)
    runs = [_DatabaseRun(name, one, available_now, stop.child(), source, started, build,
                         metrics)
            for name, one in config.each_database() if name is not None]
    with exported(config.metrics, metrics.registry, available_now, config.relay.source_name):
        threads = [threading.Thread(target=r.run, name=f"relay-db-{r.name}", daemon=True)
                   for r in runs]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)
    return ManyResult([r.outcome for r in runs], time.monotonic() - began)


class _DatabaseRun:
    def __init__(self, name: str, config: Config, available_now: bool, stop: StopSignal,
                 source: SparkSource, started: float | None,
                 build: Callable[[Config], Relay], metrics: DatabaseMetrics) -> None:
        self.name = name
        self.config = config
        self.available_now = available_now
        self.stop = stop
        self.source = source
        self.started = started
        self.build = build
        self.metrics = metrics
        self.outcome = DatabaseOutcome(name)

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
            if self.available_now and attempts >= _DRAIN_ATTEMPTS:
                return
            why = (first_line(self.outcome.error) if self.outcome.error is not None
                   else f"its run ended with exit code {self.outcome.exit_code}")
            wait = min(pause, 1.0) if self.available_now else pause
            log.warning("database %s: %s; trying it again in %.0f s", self.name, why, wait)
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
                             self.started)
        finally:
            relay.close()

"""A relay of several outbox databases in one process (`[[databases]]`, `[catalog]`).

Each database has the whole control plane of a relay of one (outbox_relay.wiring's
Relay: its connections, tokens, locks, claims, ledger and liveness) and runs as one does
(outbox_relay.stream.runner), in a thread of its own (outbox_relay.stream.database_run):
its rounds go through the driver's producer, and its backlogs through Spark's executors
in the one session all of them share. A database starts a streaming query of its own,
in that session, only when it needs one: a backlog, or work its direct rounds cannot
finish alone (outbox_relay.stream.before_spark, `lazy`); an idle database costs its
polls and nothing more.

Isolation: a database's failure stops its own relay only (a child StopSignal each). A
continuous relay tries a database it cannot reach, or whose run failed, again after a
backoff, while the others relay on; a drain drains every database it reaches, and its
exit code is that of the worst outcome among them (outbox_relay.exit_codes), so a
database it could not reach makes the drain fail even when the others drained.

A catalog is read at the start and, by a continuous relay, every `databases_refresh_s`:
a database it adds starts relaying, one it removes is stopped as a stop signal stops a
relay (its round in flight finishes, its locks are released). A catalog that cannot be
read keeps the databases it listed last.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from outbox_relay.config import Config
from outbox_relay.control.catalog import Catalog, wanted
from outbox_relay.control.idle_watch import IdleWatch
from outbox_relay.errors import RelayError
from outbox_relay.exit_codes import ExitCode, Outcome, outcome_of
from outbox_relay.launch.session import SparkSource
from outbox_relay.ledger.flusher import DrainCopiers
from outbox_relay.observe.databases import DatabaseMetrics
from outbox_relay.observe.serve import exported
from outbox_relay.stream.database_run import DRAIN_ATTEMPTS, DatabaseOutcome, DatabaseRun
from outbox_relay.stream.stop import StopSignal
from outbox_relay.wiring import Relay, build_relay

log = logging.getLogger(__name__)

_SEVERITY = (Outcome.SUCCESS, Outcome.WARN, Outcome.RETRY, Outcome.FAIL)
# How often the supervisor looks at its databases' threads and the stop.
_TICK_S = 0.5
# The outcome of a catalog a drain could not read.
CATALOG = "(catalog)"


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
             build: Callable[[Config], Relay] = lambda c: build_relay(c, None),
             env: Mapping[str, str] | None = None) -> ManyResult:
    """Relays every database of `config` until each drained (available-now) or `stop`."""
    began = time.monotonic()
    metrics = DatabaseMetrics(config.metrics.max_label_databases)

    # A continuous relay's idle databases are polled by one thread, not each by its own;
    # a drain's ledger copies are paced together.
    watch = None if available_now else IdleWatch()
    copiers = DrainCopiers() if available_now else None

    def start(name: str, one: Config) -> DatabaseRun:
        run = DatabaseRun(name, one, available_now, stop.child(), source, started, build,
                          metrics, watch, copiers)
        run.thread.start()
        return run

    if not available_now:
        # The session every database's backlog shares: up before one meets a backlog
        # (a database's rounds stay on the driver's producer until then).
        source.begin()
    catalog = Catalog(config, os.environ if env is None else env) if config.catalog else None
    fleet = _Fleet(start)
    with exported(config.metrics, metrics.registry, available_now, config.relay.source_name):
        try:
            _supervise(config, available_now, stop, fleet, catalog)
        finally:
            fleet.join()  # a parked database sees its stop within a quarter second
            if watch is not None:
                watch.close()
            if catalog is not None:
                catalog.close()
    return ManyResult(fleet.outcomes(), time.monotonic() - began)


def _supervise(config: Config, available_now: bool, stop: StopSignal, fleet: _Fleet,
               catalog: Catalog | None) -> None:
    listed = {name: one for name, one in config.each_database() if name is not None}
    cataloged: dict[str, Config] = {}
    next_read = 0.0
    while True:
        if catalog is not None and time.monotonic() >= next_read:
            read = catalog.read_tries(DRAIN_ATTEMPTS if available_now else 1)
            if isinstance(read, RelayError):
                if available_now:
                    fleet.failed(CATALOG, read)
            else:
                cataloged = read
            next_read = time.monotonic() + catalog.refresh_s
        fleet.ensure(wanted(listed, cataloged))
        if available_now or stop.wait(_TICK_S):
            return


class _Fleet:
    """The running databases, by name, and the outcomes of those that ended."""

    def __init__(self, start: Callable[[str, Config], DatabaseRun]) -> None:
        self._start = start
        self._runs: dict[str, DatabaseRun] = {}
        self._leaving: list[DatabaseRun] = []
        self._failures: list[DatabaseOutcome] = []

    def ensure(self, wanted: dict[str, Config]) -> None:
        for name, run in list(self._runs.items()):
            if wanted.get(name) != run.config:
                # Removed, or its entry changed: stopped first, started again (if still
                # wanted) once its round in flight ended, since both share its paths.
                log.warning("database %s: %s; stopping its relay", name,
                            "no longer listed" if name not in wanted else "its entry changed")
                run.stop.abort(f"database {name} is no longer relayed as it was")
                self._leaving.append(self._runs.pop(name))
        leaving = {r.name for r in self._leaving if r.thread.is_alive()}
        for name, one in wanted.items():
            if name not in self._runs and name not in leaving:
                self._runs[name] = self._start(name, one)

    def failed(self, name: str, error: BaseException) -> None:
        self._failures.append(DatabaseOutcome(name, error=error))

    def join(self) -> None:
        for run in [*self._runs.values(), *self._leaving]:
            while run.thread.is_alive():
                run.thread.join(_TICK_S)

    def outcomes(self) -> list[DatabaseOutcome]:
        """Each database's last outcome, in the order they started; a catalog a drain
        could not read last."""
        return [r.outcome for r in self._runs.values()] + self._failures

"""The databases `outbox-relay metrics serve` shows, each through a connection of its own.

A profile of one database serves that one. A profile of several serves each under its
`database` label (outbox_relay.observe.databases), and, with a [catalog], the databases
the catalog lists: read again every `catalog.databases_refresh_s`, as a continuous relay
reads it (outbox_relay.stream.many), so that the exporter of a catalog of tenants shows
a tenant added since its start and stops showing one removed, without a restart.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping

from prometheus_client import CollectorRegistry

from outbox_relay.config import Config
from outbox_relay.control.catalog import Catalog, wanted
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import require_current
from outbox_relay.errors import RelayError, first_line
from outbox_relay.observe.collector import StatusCollector
from outbox_relay.observe.databases import DatabaseMetrics

log = logging.getLogger(__name__)

APPLICATION = "outbox-relay-metrics"


def opened(name: str | None, config: Config) -> Database:
    """A connection to the database, its schema checked: a profile of one (`name` None)
    fails on a stale schema; a database of several says so, and is served (as down)."""
    db = Database(config.postgres, APPLICATION)
    try:
        require_current(db)
    except RelayError as exc:
        if name is None:
            db.close()
            raise
        print(f"database {name}: {first_line(exc)}", file=sys.stderr)
    return db


def status_registry(db: Database, config: Config, limit: int) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(db, config.relay.lock_timeout_s, config.ledger.path,
                                      max_label_topics=limit))
    return registry


class ServedDatabases:
    """The databases of a profile of several, in one exposition (`metrics.registry`)."""

    def __init__(self, config: Config, env: Mapping[str, str], limit: int) -> None:
        self.metrics = DatabaseMetrics(config.metrics.max_label_databases)
        self._limit = limit
        self._listed = {name: one for name, one in config.each_database() if name is not None}
        self._catalog = Catalog(config, env) if config.catalog is not None else None
        self._cataloged: dict[str, Config] = {}
        self._served: dict[str, tuple[Database, Config]] = {}
        self._retired: list[Database] = []

    @property
    def refresh_s(self) -> float | None:
        """How often to call `refresh`: None when nothing can change (no catalog)."""
        return None if self._catalog is None else self._catalog.refresh_s

    def refresh(self) -> None:
        """Serves what the profile and its catalog list now; a catalog that cannot be read
        keeps the databases it listed last."""
        if self._catalog is not None:
            read = self._catalog.read_tries(1)
            if not isinstance(read, RelayError):
                self._cataloged = read
        self._ensure(wanted(self._listed, self._cataloged))

    def _ensure(self, databases: dict[str, Config]) -> None:
        # Closed one refresh later: a scrape that began before its removal may still
        # read it, and would open its connection again.
        for db in self._retired:
            db.close()
        self._retired = []
        for name, (db, one) in list(self._served.items()):
            if databases.get(name) != one:
                log.info("database %s: %s", name, "no longer listed" if name not in databases
                         else "its entry changed")
                self.metrics.remove(name)
                self._retired.append(db)
                del self._served[name]
        for name, one in databases.items():
            if name not in self._served:
                db = opened(name, one)
                self._served[name] = (db, one)
                self.metrics.add(name, status_registry(db, one, self._limit))

    def close(self) -> None:
        for db in [*self._retired, *(db for db, _ in self._served.values())]:
            db.close()
        if self._catalog is not None:
            self._catalog.close()

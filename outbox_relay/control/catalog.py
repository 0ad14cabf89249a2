"""The databases a catalog lists ([catalog]): its query on the catalog database, a row per
database with the columns `name` and `url`, each made a one-database profile as a
`[[databases]]` entry is (Config.for_entry).

A row that is not a valid entry (a name that is no slug, a URL that is no PostgreSQL
URL, a name twice) is left out with an error line naming it; the others are relayed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from pydantic import SecretStr, ValidationError

from outbox_relay.config import MAX_SOURCE_NAME_BYTES, Config
from outbox_relay.config.checks import at_most_bytes
from outbox_relay.config.databases import DatabaseEntry, source_of
from outbox_relay.config.load import select_database
from outbox_relay.control.db import Database
from outbox_relay.errors import ConfigError, RelayError, first_line

log = logging.getLogger(__name__)

COLUMNS = ("name", "url")


class Catalog:
    def __init__(self, config: Config, env: Mapping[str, str]) -> None:
        catalog = config.catalog
        assert catalog is not None
        self._config = config
        self._env = env
        self._settings = catalog
        self._db = Database(config.postgres.model_copy(update={
            "url": catalog.url, "password": catalog.password,
            "password_env": catalog.password_env}), "outbox-relay-catalog")

    @property
    def refresh_s(self) -> float:
        return self._settings.databases_refresh_s

    def read(self) -> dict[str, Config]:
        """Every valid database the catalog lists now, by name. RelayError when the
        catalog cannot be read."""
        rows = self._db.all(self._settings.query)
        if rows and not all(c in rows[0] for c in COLUMNS):
            raise ConfigError("catalog.query: must return the columns name and url, "
                              f"returned {', '.join(rows[0])}")
        found: dict[str, Config] = {}
        for row in rows:
            name = row["name"]
            if name in found:
                log.error("catalog: database %r listed twice; the first row is relayed", name)
                continue
            try:
                found[str(name)] = self._config.for_entry(self._entry(row))
            except (ValidationError, ValueError) as exc:
                log.error("catalog: database %r left out: %s", name, _reason(exc))
        return found

    def _entry(self, row: Mapping[str, object]) -> DatabaseEntry:
        entry = DatabaseEntry(name=row["name"], url=row["url"],
                              password_env=self._settings.databases_password_env)
        at_most_bytes(source_of(self._config.relay.source_name, entry.name),
                      MAX_SOURCE_NAME_BYTES)
        password = self._env.get(entry.password_variable)
        return entry.model_copy(update={"password": SecretStr(password)}) if password else entry

    def read_tries(self, attempts: int) -> dict[str, Config] | RelayError:
        """`read`, tried up to `attempts` times a second apart: what it read, or the
        last attempt's error (each attempt's logged)."""
        for attempt in range(1, attempts + 1):
            try:
                return self.read()
            except RelayError as exc:
                log.warning("catalog: cannot read the databases (attempt %d of %d): %s",
                            attempt, attempts, first_line(exc))
                if attempt == attempts:
                    return exc
                time.sleep(1.0)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._db.close()


def wanted(listed: Mapping[str, Config], cataloged: Mapping[str, Config]) -> dict[str, Config]:
    """The databases to relay (or serve), the profile's in its order, then the catalog's
    by name: a name in both is the profile's, since its entry is the one a person wrote."""
    return {**listed, **{name: one for name, one in sorted(cataloged.items())
                         if name not in listed}}


def every_database(config: Config, env: Mapping[str, str]) -> list[tuple[str | None, Config]]:
    """Config.each_database, with the databases a catalog lists now after the profile's
    own (a name in both is the profile's)."""
    listed = config.each_database()
    if config.catalog is None:
        return listed
    named = {name: one for name, one in listed if name is not None}  # all: a catalog's
    return [(name, one) for name, one in wanted(named, _read_once(config, env)).items()]


def database_config(config: Config, name: str, env: Mapping[str, str]) -> Config:
    """The one-database profile of `name`, the profile's or its catalog's."""
    try:
        return select_database(config, name)
    except ConfigError:
        if config.catalog is None:
            raise
    found = _read_once(config, env).get(name)
    if found is None:
        raise ConfigError(f"--database {name}: neither the profile nor its catalog lists "
                          "such a database")
    return found


def _read_once(config: Config, env: Mapping[str, str]) -> dict[str, Config]:
    catalog = Catalog(config, env)
    try:
        return catalog.read()
    finally:
        catalog.close()


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(exc)

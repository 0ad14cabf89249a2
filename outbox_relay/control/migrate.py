"""Applies the versioned SQL files of outbox_relay/schemas/ (package data, so they ship in the
wheel), idempotently and safely in parallel."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from outbox_relay.config import PostgresConfig
from outbox_relay.control.db import Database
from outbox_relay.errors import ConfigError, DatabaseError, MigrationError, RelayError

log = logging.getLogger(__name__)

SCHEMAS_DIR = Path(__file__).resolve().parents[1] / "schemas"
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

# Any constant works; it only has to be the same for every relay that migrates.
MIGRATION_LOCK_KEY = 7_301_455_122

CREATE_HISTORY = """
CREATE TABLE IF NOT EXISTS relay_schema_migrations (
    version    integer     PRIMARY KEY,
    name       varchar     NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
TAKE_LOCK = "SELECT pg_advisory_xact_lock(%s)"
APPLIED = "SELECT version FROM relay_schema_migrations"
RECORD = "INSERT INTO relay_schema_migrations (version, name) VALUES (%s, %s)"
LATEST_MIGRATION = "SELECT coalesce(max(version), 0) AS version FROM relay_schema_migrations"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def discover(directory: Path = SCHEMAS_DIR) -> list[Migration]:
    if not directory.is_dir():
        raise MigrationError(f"schema directory not found: {directory}")
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _FILE.match(path.name)
        if not match:
            raise MigrationError(f"schema file name must be NNNN_name.sql: {path.name}")
        found.append(Migration(int(match[1]), match[2], path.read_text(encoding="utf-8")))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError("two schema files share a version number")
    return found


def migrate(db: Database, directory: Path = SCHEMAS_DIR) -> list[str]:
    """Apply what is missing, in one transaction under an advisory lock; return their names.

    A second migrate running at the same time waits on the lock, then finds
    everything applied. DDL is transactional in PostgreSQL, so a failure applies nothing.
    """
    migrations = discover(directory)
    try:
        with db.transaction() as cur:
            cur.execute(TAKE_LOCK, (MIGRATION_LOCK_KEY,))
            cur.execute(CREATE_HISTORY)
            cur.execute(APPLIED)
            applied = {row["version"] for row in cur.fetchall()}
            done = []
            for m in migrations:
                if m.version in applied:
                    continue
                log.info("applying migration %04d_%s", m.version, m.name)
                cur.execute(m.sql)
                cur.execute(RECORD, (m.version, m.name))
                done.append(f"{m.version:04d}_{m.name}")
            return done
    except DatabaseError as exc:
        raise MigrationError(f"migration failed: {exc}") from exc


def require_current(db: Database, directory: Path = SCHEMAS_DIR) -> None:
    """Refuses a database whose schema is older than this relay's, in one line that says
    what to run: a command would otherwise fail on the first column it misses, or a
    statement meant for the new schema could misread the old one. Nothing migrates at its
    start, the relay included (its preflight calls this, so a run exits USAGE): only
    `outbox-relay migrate` (jobs/migrate.py, the bundle's and the DAG's migrate tasks)
    changes the schema, never under a running relay of the older version by surprise."""
    try:
        row = db.one(LATEST_MIGRATION)
    except RelayError as exc:
        if "relay_schema_migrations" in str(exc):
            raise ConfigError(
                "the database has no relay schema: run `outbox-relay migrate`"
            ) from None
        raise
    at = int(row["version"]) if row is not None else 0
    missing = [f"{m.version:04d}_{m.name}" for m in discover(directory) if m.version > at]
    if missing:
        raise ConfigError(
            f"the database schema is behind (at {at:04d}; missing {', '.join(missing)}): "
            "run `outbox-relay migrate`"
        )


def check_schema(postgres: PostgresConfig) -> None:
    """require_current on a connection of its own: the preflight of a run's database."""
    db = Database(postgres, "outbox-relay-preflight")
    try:
        require_current(db)
    finally:
        db.close()

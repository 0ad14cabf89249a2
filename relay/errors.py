"""The project's own errors. Driver errors are translated into these at the boundary."""

from __future__ import annotations


class RelayError(Exception):
    """Base class of every error the relay raises on purpose."""

    exit_code = 1


class ConfigError(RelayError):
    """Invalid or missing configuration; the message names the key."""

    exit_code = 2


class UnreachableError(RelayError):
    """A service (PostgreSQL or Kafka) cannot be reached; the message names which."""

    exit_code = 4


class DatabaseError(RelayError):
    """A PostgreSQL statement failed."""


class DatabaseUnavailableError(DatabaseError):
    """The connection to PostgreSQL failed or dropped: worth retrying later."""


class LockLostError(RelayError):
    """This process no longer holds a topic lock it needed."""


class MigrationError(RelayError):
    """A schema migration failed or the schema is in an unexpected state."""

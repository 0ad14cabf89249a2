"""The project's own errors. Driver errors are translated into these at the boundary."""

from __future__ import annotations

import logging
import sys
import traceback

from outbox_relay.exit_codes import ExitCode


class RelayError(Exception):
    """Base class of every error the relay raises on purpose."""

    exit_code: ExitCode = ExitCode.RELAY_ERROR


class ConfigError(RelayError):
    """Invalid or missing configuration; the message names the key."""

    exit_code = ExitCode.USAGE


class UnreachableError(RelayError):
    """A service (PostgreSQL or Kafka) cannot be reached; the message names which."""

    exit_code = ExitCode.UNREACHABLE


class NotRunningError(RelayError):
    """A service the profile names is not running, and nothing here starts it (the local
    stack); the message names the command that does."""

    exit_code = ExitCode.NOT_FOUND


class DatabaseError(RelayError):
    """A PostgreSQL statement failed."""

    exit_code = ExitCode.DATABASE_ERROR


class DatabaseUnavailableError(DatabaseError):
    """The connection to PostgreSQL failed or dropped: worth retrying later."""

    exit_code = ExitCode.DATABASE_LOST


# After such an error a batch body (or the drain lane) gives up its rounds, and the next
# ones retry after this pause.
RETRY_PAUSE_S = 2.0


class LockLostError(RelayError):
    """This process no longer holds a topic lock it needed."""

    exit_code = ExitCode.LOCK_LOST


class MigrationError(RelayError):
    """A schema migration failed or the schema is in an unexpected state."""

    exit_code = ExitCode.MIGRATION_FAILED


class PublishError(RelayError):
    """The publisher (outbox_relay.outbox.publisher) refused a call; nothing was written."""


class InvalidMessageError(PublishError):
    """A message the relay would refuse to send, or of a type the outbox cannot hold; the
    message names which one (its index in publish_many) and what is wrong."""


class NoTransactionError(PublishError):
    """A publish outside a transaction: the outbox row would commit on its own, apart from
    the application's data. The caller may opt out explicitly (allow_autocommit=True)."""


def first_line(exc: BaseException) -> str:
    """What a driver's message says, without what follows: psycopg2's context lines,
    delta-rs's native backtrace, the JVM's stack trace."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def exit_code_for(exc: BaseException) -> ExitCode:
    """The exit code of what ended a run or a command; the one place that maps errors to
    codes. An error of the relay carries its own. One that Spark or the JVM raised (a
    job or a query that failed) is QUERY_FAILED, which a scheduler retries. Anything else
    is a defect: retrying repeats it, and Python's own exit 1 would read as "topics left
    over" to a scheduler."""
    if isinstance(exc, RelayError):
        return exc.exit_code
    if _raised_by_spark(exc):
        return ExitCode.QUERY_FAILED
    return ExitCode.DEFECT


def _raised_by_spark(exc: BaseException) -> bool:
    # By module name: importing pyspark here would load it for every command.
    return any(cls.__module__.partition(".")[0] in ("pyspark", "py4j")
               for cls in type(exc).__mro__)


def exit_code_of(exc: Exception, prefix: str = "outbox-relay") -> ExitCode:
    """Reports what ended a command on stderr: one line for an error of the relay, the
    traceback for anything else. `stack` says "error:", as it always has."""
    if isinstance(exc, RelayError):
        print(f"{prefix}: {exc}", file=sys.stderr)
    else:
        traceback.print_exc()
    return exit_code_for(exc)


def logged_exit_code(exc: Exception, log: logging.Logger) -> ExitCode:
    """exit_code_of's report as a log record, so that JSON logs hold it too: one line for
    an error of the relay, the traceback for Spark's failure or a defect."""
    code = exit_code_for(exc)
    if isinstance(exc, RelayError):
        log.error("outbox-relay: %s", exc)
    elif code is ExitCode.DEFECT:
        log.error("outbox-relay: unexpected error (a defect)", exc_info=exc)
    else:
        log.error("outbox-relay: Spark failed", exc_info=exc)
    return code

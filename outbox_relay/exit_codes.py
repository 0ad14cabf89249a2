"""Every exit code of the relay and of every command, in one table (docs/exit-codes.md prints it),
with the one outcome each code has for whatever runs it.

Schedulers (Airflow, Databricks, Kubernetes, systemd) act on these numbers, so each
outcome has a number of its own and a number never changes its meaning. Every runner
follows `ExitCode.outcome` (dags/outbox_relay_exits.py, outbox_relay/databricks_task.py);
docs/exit-codes.md says how each one carries it out.
"""

from __future__ import annotations

from enum import Enum, IntEnum


class Outcome(Enum):
    """What a runner makes of an exit, whichever runner it is."""

    SUCCESS = "success"
    WARN = "success, with a warning"
    RETRY = "failure; another attempt may succeed"
    FAIL = "failure that a retry would repeat; a person fixes it"


class ExitCode(IntEnum):
    OK = 0
    LEFT_OVER = 1
    USAGE = 2
    INTERRUPTED = 3
    UNREACHABLE = 4
    QUERY_FAILED = 5
    NOT_VERIFIED = 6
    DATABASE_ERROR = 7
    DATABASE_LOST = 8
    LOCK_LOST = 9
    MIGRATION_FAILED = 10
    NOT_FOUND = 11
    DECLINED = 12
    STACK_FAILED = 13
    RELAY_ERROR = 14
    DEFECT = 15
    UNHEALTHY = 16
    BUSY = 17
    AT_ONCE = 130

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]

    @property
    def outcome(self) -> Outcome:
        return _OUTCOMES[self]


_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "drained (available-now), stopped cleanly (continuous), or the command did "
    "what was asked",
    ExitCode.LEFT_OVER: "available-now: topics left in error or locked elsewhere after "
    "`relay.available_now_deadline_s`, or rows left when the time budget ran out "
    "(`relay.available_now_budget_s`), one line each",
    ExitCode.USAGE: "invalid configuration or command line (the line names the key), a Python "
    "without the `[spark]` extra (the line names the missing modules), or a database schema "
    "older than the relay's (the line names the missing migrations: run `outbox-relay migrate`)",
    ExitCode.INTERRUPTED: "available-now: a stop signal came before the outbox drained",
    ExitCode.UNREACHABLE: "PostgreSQL or Kafka unreachable (the line names which, never the "
    "password)",
    ExitCode.QUERY_FAILED: "the streaming query failed",
    ExitCode.NOT_VERIFIED: "available-now: PostgreSQL unreachable at the end, so whether the "
    "outbox drained is unknown",
    ExitCode.DATABASE_ERROR: "a PostgreSQL statement failed",
    ExitCode.DATABASE_LOST: "the connection to PostgreSQL dropped",
    ExitCode.LOCK_LOST: "this process lost a topic lock it needed",
    ExitCode.MIGRATION_FAILED: "a schema migration failed, or the schema files are invalid",
    ExitCode.NOT_FOUND: "what the command names does not exist (a topic, a ledger record, "
    "the local stack)",
    ExitCode.DECLINED: "nothing done: the confirmation was refused or could not be asked",
    ExitCode.STACK_FAILED: "the local stack could not start or stop",
    ExitCode.RELAY_ERROR: "another error of the relay (the line says which)",
    ExitCode.DEFECT: "an unexpected error, a defect: the traceback is printed",
    ExitCode.UNHEALTHY: "`status`: a monitoring threshold was crossed (`--max-age-s`, "
    "`--fail-on`); the output names each topic and why",
    ExitCode.BUSY: "nothing done: a relay is working on what the command names (its topic "
    "lock is alive, or a message is in a live session); try again later",
    ExitCode.AT_ONCE: "a second stop signal: exited at once, without the graceful stop",
}


# Retried: what another attempt may well not meet (an outage, a lost connection or lock,
# a stop signal such as a scheduler's own on a timeout); a retry reads what is still in
# the outbox, at least once, as after any restart. FAIL: what only a person fixes (the
# profile, the schema files, a defect); a retry would repeat it and hide it.
_OUTCOMES: dict[ExitCode, Outcome] = {
    ExitCode.OK: Outcome.SUCCESS,
    # Every other topic drained; the ones left over wait in error (a poison message, a
    # missing topic) or are another relay's. A red run every 5 minutes would not drain
    # them any faster: their state is in `outbox-relay topics` (kafka_topic_info).
    ExitCode.LEFT_OVER: Outcome.WARN,
    ExitCode.USAGE: Outcome.FAIL,
    ExitCode.INTERRUPTED: Outcome.RETRY,
    ExitCode.UNREACHABLE: Outcome.RETRY,
    ExitCode.QUERY_FAILED: Outcome.RETRY,
    ExitCode.NOT_VERIFIED: Outcome.RETRY,
    ExitCode.DATABASE_ERROR: Outcome.RETRY,
    ExitCode.DATABASE_LOST: Outcome.RETRY,
    ExitCode.LOCK_LOST: Outcome.RETRY,
    ExitCode.MIGRATION_FAILED: Outcome.FAIL,
    # Codes of the operator's commands (ledger, parked, stack, status, skip): a scheduled
    # one (a `status` check, say) fails until a person looks.
    ExitCode.NOT_FOUND: Outcome.FAIL,
    ExitCode.DECLINED: Outcome.FAIL,
    ExitCode.STACK_FAILED: Outcome.FAIL,
    ExitCode.RELAY_ERROR: Outcome.RETRY,
    ExitCode.DEFECT: Outcome.FAIL,
    ExitCode.UNHEALTHY: Outcome.FAIL,
    ExitCode.BUSY: Outcome.RETRY,  # nothing done while a relay works on it: later, it may
    ExitCode.AT_ONCE: Outcome.RETRY,
}


def outcome_of(status: int) -> Outcome:
    """The outcome of a process's exit status. A status outside the table (a signal's,
    spark-submit's 143 on a stop before the relay runs, a JVM's crash) is retried."""
    try:
        return ExitCode(status).outcome
    except ValueError:
        return Outcome.RETRY


def markdown_table() -> str:
    """The table of exit codes and their outcomes that docs/exit-codes.md prints."""
    rows = [f"| {int(c)} | `{c.name}` | {c.meaning} | {c.outcome.name} |" for c in ExitCode]
    return "\n".join(["| code | name | meaning | outcome |", "| --- | --- | --- | --- |", *rows])

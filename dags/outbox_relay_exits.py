"""What each relay exit code means to Airflow: the one table of decisions, and the retry
policy (Airflow 3.3's ``retry_policy``, AIP-105) that applies its "failed, not retried".

The numbers come from `outbox_relay/exit_codes.py`, the project's one table: this module imports
it (it needs nothing but the standard library), so a code added there without a decision
here fails the DAG file's import, and the DagBag test, instead of being guessed at.
docs/airflow.md prints the same decisions as a table (`markdown_table`).
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule
from airflow.sdk.exceptions import AirflowException

# The checkout the DAG runs from: jobs/ and conf/ are there, and so is the
# relay package whose exit-code table this module reads.
RELAY_HOME = Path(os.environ.get("OUTBOX_RELAY_HOME") or Path(__file__).resolve().parents[1])
if str(RELAY_HOME) not in sys.path:
    sys.path.append(str(RELAY_HOME))

from outbox_relay.exit_codes import ExitCode  # noqa: E402 - needs RELAY_HOME on the path

# The line the relay prints for each topic an available-now drain left over
# (outbox_relay/app.py, print_summary). The left-over scenario of tests/airflow runs the real
# relay: a changed line would turn its success into a retried failure there.
LEFT_OVER_LINE = "left over: topic "
LEFT_OVER_XCOM = "left_over"


class Outcome(enum.Enum):
    SUCCESS = "success"
    WARN = "success, with a warning in the task log"
    RETRY = "failure, retried (the task's retries)"
    FAIL = "failure, not retried"


# Retried: what another attempt may well not meet (an outage, a lost connection or lock,
# a stop signal such as Airflow's own on a timeout). Not retried: what only a person
# fixes (the profile, the schema files, a defect); retrying would repeat it and hide it.
POLICY: Mapping[ExitCode, Outcome] = {
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
    # Codes of other commands (ledger, parked, stack, status); the DAG runs none of them.
    ExitCode.NOT_FOUND: Outcome.FAIL,
    ExitCode.DECLINED: Outcome.FAIL,
    ExitCode.STACK_FAILED: Outcome.FAIL,
    ExitCode.RELAY_ERROR: Outcome.RETRY,
    ExitCode.DEFECT: Outcome.FAIL,
    ExitCode.UNHEALTHY: Outcome.FAIL,
    ExitCode.BUSY: Outcome.FAIL,  # `skip`'s code; the DAG never runs it
    ExitCode.AT_ONCE: Outcome.RETRY,
}
_UNDECIDED = set(ExitCode) - set(POLICY)
if _UNDECIDED:
    raise ImportError(f"relay exit codes without an Airflow outcome: {sorted(_UNDECIDED)}")


def outcome(returncode: int, left_over: Iterable[str] = ()) -> Outcome:
    """Airflow's outcome for spark-submit's exit status.

    Exit 1 is also what spark-submit's launcher and a Python that cannot even import the
    job return, so it counts as LEFT_OVER only next to the relay's own left-over lines.
    A status outside the table (a signal's negative status, a JVM crash) is retried.
    """
    try:
        code = ExitCode(returncode)
    except ValueError:
        return Outcome.RETRY
    if code is ExitCode.LEFT_OVER and not any(True for _ in left_over):
        return Outcome.RETRY
    return POLICY[code]


def describe(returncode: int, left_over: Iterable[str] = ()) -> str:
    if returncode == ExitCode.LEFT_OVER and not any(True for _ in left_over):
        return "without the relay's left-over lines: spark-submit's or Python's own failure"
    try:
        return ExitCode(returncode).name
    except ValueError:
        return "not a relay exit code"


class RelayExit(AirflowException):
    """spark-submit exited with a status that fails the task; `returncode` is that status."""

    def __init__(self, returncode: int, message: str) -> None:
        super().__init__(message)
        self.returncode = returncode


class RelayExitRetried(RelayExit):
    """A failure the task's retries may get past (`Outcome.RETRY`)."""


class RelayExitNotRetried(RelayExit):
    """A failure only a person fixes (`Outcome.FAIL`): `RETRY_POLICY` fails it at once."""


def exit_error(returncode: int, left_over: Iterable[str] = ()) -> RelayExit | None:
    """The exception a failing status raises, None when the status is a success."""
    lines = list(left_over)
    decided = outcome(returncode, lines)
    if decided in (Outcome.SUCCESS, Outcome.WARN):
        return None
    message = f"relay exit {returncode} ({describe(returncode, lines)}): {decided.value}"
    if decided is Outcome.FAIL:
        return RelayExitNotRetried(returncode, message)
    return RelayExitRetried(returncode, message)


# The decision travels as the exception's class, so the policy needs nothing but
# Airflow's declarative rule (serialisable with the DAG; evaluated on the worker).
# Not AirflowFailException: Airflow never consults a retry policy for that one, and the
# policy's reason is what the task instance records.
RETRY_POLICY = ExceptionRetryPolicy(rules=[
    RetryRule(exception=RelayExitNotRetried, action=RetryAction.FAIL,
              reason="relay exit code that only a person fixes (docs/airflow.md): not retried"),
])


def markdown_table() -> str:
    """The table of what each exit code means to Airflow, as docs/airflow.md prints it."""
    rows = [f"| {int(c)} | `{c.name}` | {POLICY[c].value} |" for c in ExitCode]
    return "\n".join(["| code | name | to Airflow |", "| --- | --- | --- |", *rows])

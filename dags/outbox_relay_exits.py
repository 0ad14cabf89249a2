"""The relay's exit-code policy (outbox_relay/exit_codes.py, `ExitCode.outcome`) carried out
by Airflow: the exceptions a failing status raises, and what keeps a FAIL code from
being retried on each Airflow 3 release.

- Airflow 3.3 and later: the task's ``retry_policy`` (pluggable retry policies, AIP-105),
  an ``ExceptionRetryPolicy`` whose one rule fails `RelayExitNotRetried` at once and
  records its reason on the task instance.
- Airflow 3.0 to 3.2 have no retry policies: `RelayExitNotRetried` is an
  ``AirflowFailException`` there, which fails the task without its retries.

Everything else a failure raises takes the task's own ``retries``. docs/exit-codes.md
prints the policy and what each runner does with it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# The providers' own layer over what moved between Airflow releases (airflow.exceptions in
# 3.0, airflow.sdk.exceptions later); both providers depend on it.
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

try:  # Airflow 3.3 and later
    from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule
except ImportError:  # Airflow 3.0 to 3.2
    ExceptionRetryPolicy = None

# The checkout the DAG runs from: jobs/ and conf/ are there, and so is the
# relay package whose exit-code table this module reads.
RELAY_HOME = Path(os.environ.get("OUTBOX_RELAY_HOME") or Path(__file__).resolve().parents[1])
if str(RELAY_HOME) not in sys.path:
    sys.path.append(str(RELAY_HOME))

from outbox_relay.exit_codes import ExitCode, Outcome, outcome_of  # noqa: E402 - RELAY_HOME

# The line the relay prints for each topic an available-now drain left over
# (outbox_relay/app.py, print_summary). The left-over scenario of tests/airflow runs the real
# relay: a changed line would turn its success into a retried failure there.
LEFT_OVER_LINE = "left over: topic "
LEFT_OVER_XCOM = "left_over"


def outcome(returncode: int, left_over: Iterable[str] = ()) -> Outcome:
    """The outcome of spark-submit's exit status.

    Exit 1 is also what spark-submit's launcher and a Python that cannot even import the
    job return, so it counts as LEFT_OVER only next to the relay's own left-over lines.
    """
    if returncode == ExitCode.LEFT_OVER and not any(True for _ in left_over):
        return Outcome.RETRY
    return outcome_of(returncode)


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


# Not AirflowFailException where a retry policy exists: Airflow never consults the policy
# for that one, and the policy's reason is what the task instance records.
_NOT_RETRIED_BASE: type[Exception] = (AirflowException if ExceptionRetryPolicy
                                      else AirflowFailException)


class RelayExitNotRetried(RelayExit, _NOT_RETRIED_BASE):  # type: ignore[misc,valid-type]
    """A failure only a person fixes (`Outcome.FAIL`): failed at once, without retries."""


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
RETRY_POLICY: Any = ExceptionRetryPolicy(rules=[
    RetryRule(exception=RelayExitNotRetried, action=RetryAction.FAIL,
              reason="relay exit code that only a person fixes (docs/exit-codes.md): not retried"),
]) if ExceptionRetryPolicy else None

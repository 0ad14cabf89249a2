"""`outbox-relay-task`: the entry point of the Databricks bundle's python_wheel_tasks
(pyproject.toml, [project.entry-points.databricks]; resources/outbox_relay.job.yml).

It takes the arguments of `outbox-relay` (its task parameters arrive as `sys.argv`).
Databricks' wheel launcher loads the entry point, calls it and drops what it returns, so
only an exception fails the task. The exit code's outcome (outbox_relay/exit_codes.py,
the one policy of every runner) decides: a success returns, a warning (topics left over)
returns after one line in the task's log, a failure raises `TaskFailed`. A job task's
retries cannot be chosen per exit code, so its retries follow a FAIL too, each failing
the same way in seconds; docs/exit-codes.md says so.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from outbox_relay.cli import main as cli_main
from outbox_relay.exit_codes import ExitCode, Outcome, outcome_of

PREFIX = "outbox-relay-task:"


def _describe(code: int) -> str:
    """`code`, what it means and its outcome, for the task's log or its error."""
    try:
        what = f"{ExitCode(code).name}: {ExitCode(code).meaning}"
    except ValueError:
        what = "not a code of outbox_relay.exit_codes"
    return f"outbox-relay exited with {code} ({what}); {outcome_of(code).value}"


class TaskFailed(RuntimeError):
    """The command's exit code is a failure (RETRY or FAIL); the job's task fails with
    this line, which names the code and its outcome."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.outcome = outcome_of(code)
        super().__init__(_describe(code))


def main(argv: Sequence[str] | None = None) -> None:
    code = cli_main(argv)
    outcome = outcome_of(code)
    if outcome is Outcome.WARN:
        # Above it the relay printed a line for each topic left over.
        print(f"{PREFIX} warning: {_describe(code)}; see `outbox-relay topics`",
              file=sys.stderr, flush=True)
    elif outcome is not Outcome.SUCCESS:
        raise TaskFailed(code)

"""`outbox-relay-task`: the entry point of the Databricks bundle's python_wheel_tasks
(pyproject.toml, [project.entry-points.databricks]; resources/outbox_relay.job.yml).

It takes the arguments of `outbox-relay` (its task parameters arrive as `sys.argv`).
Databricks' wheel launcher loads the entry point, calls it and drops what it returns, so
the exit code that `outbox-relay` returns would never fail the task: a drain that left
topics over (exit 1) would show as a success. Here a non-zero code is raised instead, as
an exception that names it; a success returns None.
"""

from __future__ import annotations

from collections.abc import Sequence

from outbox_relay.cli import main as cli_main
from outbox_relay.exit_codes import ExitCode


class TaskFailed(RuntimeError):
    """The command ended with a non-zero exit code; the job's task fails with this line."""

    def __init__(self, code: int) -> None:
        self.code = code
        try:
            what = f"{ExitCode(code).name}: {ExitCode(code).meaning}"
        except ValueError:
            what = "not a code of outbox_relay.exit_codes"
        super().__init__(f"outbox-relay exited with {code} ({what})")


def main(argv: Sequence[str] | None = None) -> None:
    code = cli_main(argv)
    if code != ExitCode.OK:
        raise TaskFailed(code)

"""What each relay exit code means to Airflow, and the spark-submit operator that applies it.

The numbers come from `relay/exit_codes.py`, the project's one table: this module imports
it (it needs nothing but the standard library), so a code added there without a decision
here fails the DAG file's import, and the DagBag test, instead of being guessed at.

docs/airflow.md prints the same decisions as a table.
"""

from __future__ import annotations

import enum
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

# The checkout the DAG runs from: jobs/ and conf/ are there, and so is the
# relay package whose exit-code table this module reads.
RELAY_HOME = Path(os.environ.get("OUTBOX_RELAY_HOME") or Path(__file__).resolve().parents[1])
if str(RELAY_HOME) not in sys.path:
    sys.path.append(str(RELAY_HOME))

from relay.exit_codes import ExitCode  # noqa: E402 - needs RELAY_HOME on the path

# The line the relay prints for each topic an available-now drain left over
# (relay/app.py, print_summary). The left-over scenario of tests/airflow runs the real
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

    Exit 1 is also what spark-submit's JVM and a Python that cannot even import the job
    return, so it counts as LEFT_OVER only next to the relay's own left-over lines. A
    status outside the table (a signal's negative status, a JVM crash) is retried.
    """
    try:
        code = ExitCode(returncode)
    except ValueError:
        return Outcome.RETRY
    if code is ExitCode.LEFT_OVER and not any(True for _ in left_over):
        return Outcome.RETRY
    return POLICY[code]


def _describe(returncode: int, left_over: list[str]) -> str:
    if returncode == ExitCode.LEFT_OVER and not left_over:
        return "without the relay's left-over lines: spark-submit's or Python's own failure"
    try:
        return ExitCode(returncode).name
    except ValueError:
        return "not a relay exit code"


class RelaySparkSubmitOperator(SparkSubmitOperator):
    """`SparkSubmitOperator` that reads the relay's exit code through `POLICY`.

    Client deploy mode only (the provider's default): there spark-submit exits with the
    driver's code. On a kill (a timeout, a task marked failed) spark-submit first gets
    SIGTERM, which the relay turns into its graceful stop, and only after `stop_grace_s`
    the provider's SIGKILL.
    """

    def __init__(self, *, stop_grace_s: float = 45.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stop_grace_s = stop_grace_s
        self.left_over: list[str] = []

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        # The hook logs spark-submit's output line by line and keeps none of it; watch the
        # same lines for the relay's left-over report (see `outcome`).
        process = hook._process_spark_submit_log

        def watched(lines: Iterator[Any]) -> None:
            process(self._watch(lines))

        hook._process_spark_submit_log = watched  # type: ignore[method-assign]
        return hook

    def _watch(self, lines: Iterator[Any]) -> Iterator[Any]:
        for line in lines:
            if str(line).strip().startswith(LEFT_OVER_LINE):
                self.left_over.append(str(line).strip())
            yield line

    def execute(self, context: Any) -> None:
        self.left_over = []
        try:
            super().execute(context)
            return
        except AirflowException as exc:
            process = self._hook._submit_sp if self._hook is not None else None
            if process is None or not process.returncode:
                raise  # failed before spark-submit ran, or for another reason than its exit
            code = process.returncode
            decided = outcome(code, self.left_over)
            name = _describe(code, self.left_over)
            if decided is Outcome.WARN:
                self.log.warning(
                    "relay exit %d (%s): %s. Counted as a success; see `outbox-relay topics`.",
                    code, name, "; ".join(self.left_over))
                # For a downstream alert, or a look in the UI: which topics, and why.
                context["ti"].xcom_push(key=LEFT_OVER_XCOM, value=self.left_over)
                return
            message = f"relay exit {code} ({name}): {decided.value}"
            if decided is Outcome.FAIL:
                raise AirflowFailException(message) from exc
            raise AirflowException(message) from exc

    def on_kill(self) -> None:
        process = self._hook._submit_sp if self._hook is not None else None
        if process is not None and process.poll() is None:
            self.log.info("SIGTERM to spark-submit: the relay stops gracefully")
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:
                self.log.warning("spark-submit still running after %.0f s", self.stop_grace_s)
        super().on_kill()


def markdown_table() -> str:
    """The table of what each exit code means to Airflow, as docs/airflow.md prints it."""
    rows = [f"| {int(c)} | `{c.name}` | {POLICY[c].value} |" for c in ExitCode]
    return "\n".join(["| code | name | to Airflow |", "| --- | --- | --- |", *rows])

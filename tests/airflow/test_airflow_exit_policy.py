"""The relay's exit-code policy carried out by Airflow: every code takes its
`ExitCode.outcome`, exit 1 counts as LEFT_OVER only with the relay's own lines, FAIL
codes fail at once (the retry policy from Airflow 3.3, an AirflowFailException before)
and no other code does, the DAGs' docs print the policy, and the operator reads the
status of the spark-submit process it starts.

The operator runs a real child here: a `spark-submit` on PATH that runs the application
with Python, as spark-submit does in client mode, without Spark (the drains of
test_airflow_spark_dag.py run the real one). This module runs in each Airflow venv,
the oldest Airflow 3 and the newest (tests/integration/test_airflow_dags.py).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException
from outbox_relay_exits import (
    LEFT_OVER_LINE,
    RETRY_POLICY,
    RelayExit,
    RelayExitNotRetried,
    RelayExitRetried,
    exit_error,
    outcome,
)
from outbox_relay_operators import RelaySparkSubmitOperator

from outbox_relay.exit_codes import ExitCode, Outcome, markdown_table
from tests.airflow.conftest import REPO

LOCKED = f"{LEFT_OVER_LINE}orders: locked by another-relay"


@pytest.mark.parametrize("code", list(ExitCode), ids=lambda c: c.name)
def test_every_code_takes_the_outcome_of_the_one_policy(code: ExitCode) -> None:
    lines = [LOCKED] if code is ExitCode.LEFT_OVER else []
    assert outcome(code, lines) is code.outcome


@pytest.mark.parametrize(("code", "lines", "expected"), [
    (0, [], Outcome.SUCCESS),
    (1, [LOCKED], Outcome.WARN),
    (1, [], Outcome.RETRY),  # spark-submit's own exit 1, or Python failing to import
    (2, [], Outcome.FAIL),
    (4, [], Outcome.RETRY),
    (10, [], Outcome.FAIL),
    (15, [], Outcome.FAIL),
    (130, [], Outcome.RETRY),
    (-9, [], Outcome.RETRY),  # killed by a signal
    (137, [], Outcome.RETRY),  # not a relay code
])
def test_outcome(code: int, lines: list[str], expected: Outcome) -> None:
    assert outcome(code, lines) is expected


def _fails_at_once(error: RelayExit) -> bool:
    """Whether this Airflow fails `error` without the task's retries."""
    if RETRY_POLICY is None:  # Airflow 3.0 to 3.2
        return isinstance(error, AirflowFailException)
    from airflow.sdk import RetryAction

    action = RETRY_POLICY.evaluate(error, try_number=1, max_tries=3).action
    assert action in (RetryAction.FAIL, RetryAction.DEFAULT)
    return bool(action is RetryAction.FAIL)


@pytest.mark.parametrize("code", [*map(int, ExitCode), -9, -15, 137])
def test_exactly_the_fail_codes_fail_at_once(code: int) -> None:
    lines = [LOCKED] if code == ExitCode.LEFT_OVER else []
    error = exit_error(code, lines)
    decided = outcome(code, lines)

    if decided in (Outcome.SUCCESS, Outcome.WARN):
        assert error is None
        return
    assert isinstance(error, RelayExit) and error.returncode == code
    assert isinstance(error, RelayExitNotRetried) is (decided is Outcome.FAIL)
    assert isinstance(error, RelayExitRetried) is (decided is Outcome.RETRY)
    assert _fails_at_once(error) is (decided is Outcome.FAIL)


def test_the_operator_carries_the_retry_policy_where_airflow_has_one() -> None:
    operator = RelaySparkSubmitOperator(task_id="drain", application="jobs/relay.py")

    if RETRY_POLICY is None:
        assert getattr(operator, "retry_policy", None) is None
    else:
        assert operator.retry_policy is RETRY_POLICY


def test_the_dags_docs_print_the_policy() -> None:
    from tests.airflow.dag_runs import load_dag

    for dag_id in ("outbox_relay_drain", "outbox_relay_databricks"):
        assert markdown_table() in load_dag(dag_id).doc_md


def test_the_dag_docstring_names_each_code_by_its_number() -> None:
    doc = (REPO / "dags" / "outbox_relay_dags.py").read_text(encoding="utf-8").split('"""')[1]
    named = re.findall(r"\b(\d+) ([A-Z][A-Z_]*[A-Z])\b", doc)

    assert {name for _, name in named} >= {"OK", "LEFT_OVER", "USAGE", "DEFECT"}
    assert all(ExitCode[name] == int(number) for number, name in named)


# -- the operator, on a real child process ----------------------------------------------

class _TaskInstance:
    """Records XCom pushes: the only part of the task instance `execute` touches."""

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


@pytest.fixture
def launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `spark-submit` first on PATH that drops spark-submit's options and runs the
    application with this Python, which exits with its own status."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "spark-submit"
    script.write_text(
        "#!/bin/sh\n"
        "while [ \"${1#--}\" != \"$1\" ]; do shift 2; done\n"
        f"exec {sys.executable} \"$@\"\n", encoding="utf-8")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STANDIN", '{"conn_type": "spark", "host": "local[1]"}')
    return tmp_path


def _application(directory: Path, body: str) -> str:
    path = directory / "app.py"
    path.write_text(body, encoding="utf-8")
    return str(path)


def _operator(application: str, **kwargs: Any) -> RelaySparkSubmitOperator:
    return RelaySparkSubmitOperator(task_id="drain", application=application,
                                    conn_id="spark_standin", **kwargs)


@pytest.mark.parametrize(("code", "lines", "raised"), [
    (0, [], None),
    (1, [LOCKED], None),
    (1, [], RelayExitRetried),
    (2, [], RelayExitNotRetried),
    (4, [], RelayExitRetried),
    (10, [], RelayExitNotRetried),
    (15, [], RelayExitNotRetried),
    (130, [], RelayExitRetried),
])
def test_the_operator_maps_the_status_of_the_process_it_started(
        launcher: Path, code: int, lines: list[str], raised: type[RelayExit] | None) -> None:
    prints = "".join(f"print({line!r})\n" for line in ["outbox-relay: 3 messages", *lines])
    operator = _operator(_application(launcher, f"import sys\n{prints}sys.exit({code})\n"))
    ti = _TaskInstance()

    if raised is None:
        operator.execute({"ti": ti})
        assert ti.xcom.get("left_over") == (lines or None)
    else:
        with pytest.raises(raised) as failed:
            operator.execute({"ti": ti})
        assert failed.value.returncode == code
        assert str(failed.value).startswith(f"relay exit {code} (")


def _stopper(directory: Path, on_sigterm: str) -> str:
    return _application(directory, (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, {on_sigterm})\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"))


def _kill_while_running(operator: RelaySparkSubmitOperator) -> tuple[BaseException | None, float]:
    failure: list[BaseException] = []

    def run() -> None:
        try:
            operator.execute({"ti": _TaskInstance()})
        except BaseException as exc:  # the thread hands the failure to the test
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 20
    while operator._spark_submit is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the child sets its handler before it prints 'ready'
    started = time.monotonic()
    operator.on_kill()
    thread.join(timeout=30)
    return (failure[0] if failure else None), time.monotonic() - started


def test_a_kill_sends_sigterm_first_the_relays_graceful_stop(launcher: Path) -> None:
    # Exits 3 (INTERRUPTED) on SIGTERM, as the relay does when a stop signal comes
    # before the outbox drained.
    operator = _operator(_stopper(launcher, "lambda *_: sys.exit(3)"), stop_grace_s=20)

    failure, took = _kill_while_running(operator)

    assert isinstance(failure, RelayExitRetried) and failure.returncode == ExitCode.INTERRUPTED
    assert took < 20


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(launcher: Path) -> None:
    operator = _operator(_stopper(launcher, "signal.SIG_IGN"), stop_grace_s=1)

    failure, took = _kill_while_running(operator)

    assert isinstance(failure, RelayExitRetried) and failure.returncode == -9
    assert 1 <= took < 10

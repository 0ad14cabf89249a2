"""What each relay exit code means to Airflow: every code has a decision, exit 1 counts
as LEFT_OVER only with the relay's own lines, docs/airflow.md prints the same table, and a
kill reaches spark-submit as SIGTERM first."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from outbox_relay_operators import (
    LEFT_OVER_LINE,
    POLICY,
    Outcome,
    RelaySparkSubmitOperator,
    markdown_table,
    outcome,
)

from relay.exit_codes import ExitCode
from tests.airflow.conftest import REPO


def test_every_exit_code_has_an_outcome() -> None:
    assert set(POLICY) == set(ExitCode)


@pytest.mark.parametrize(("code", "lines", "expected"), [
    (0, [], Outcome.SUCCESS),
    (1, [f"{LEFT_OVER_LINE}orders: locked by another-relay"], Outcome.WARN),
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


def test_the_docs_print_the_policy() -> None:
    page = "\n".join(line.strip() for line in
                     (REPO / "docs" / "airflow.md").read_text(encoding="utf-8").splitlines())
    assert markdown_table() in page


def test_a_kill_sends_sigterm_to_spark_submit_before_the_providers_sigkill() -> None:
    operator = RelaySparkSubmitOperator(task_id="drain", application="jobs/relay.py",
                                        conn_id="spark_no_such_connection", stop_grace_s=20)
    hook = operator._hook = operator._get_hook()
    # A real child in spark-submit's place: it exits 3 (INTERRUPTED) on SIGTERM, as the
    # relay does when a stop signal comes before the outbox drained.
    hook._submit_sp = subprocess.Popen([sys.executable, "-c", (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    assert hook._submit_sp.stdout is not None
    assert hook._submit_sp.stdout.readline().strip() == "ready"

    started = time.monotonic()
    operator.on_kill()

    assert hook._submit_sp.wait(timeout=5) == ExitCode.INTERRUPTED
    assert time.monotonic() - started < 20


def test_the_dag_docstring_names_each_code_by_its_number() -> None:
    doc = (REPO / "dags" / "outbox_relay.py").read_text(encoding="utf-8").split('"""')[1]
    named = re.findall(r"\b(\d+) ([A-Z][A-Z_]*[A-Z])\b", doc)

    assert {name for _, name in named} >= {"OK", "LEFT_OVER", "USAGE", "DEFECT"}
    assert all(ExitCode[name] == int(number) for number, name in named)

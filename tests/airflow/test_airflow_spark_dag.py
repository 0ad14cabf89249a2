"""`dag.test()` of the spark-submit DAG: real `spark-submit` runs of jobs/migrate.py and
jobs/relay.py against the local stack.

tests/integration/test_airflow_dags.py seeds the outbox of each scenario, writes their
profiles, runs this module in `.venv-airflow`, and then checks Kafka and PostgreSQL with
its own consumer. The scenarios come in the JSON file named by OUTBOX_RELAY_AIRFLOW_SCENARIOS.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
from outbox_relay_exits import LEFT_OVER_LINE, LEFT_OVER_XCOM

from outbox_relay.exit_codes import Outcome
from tests.airflow.dag_runs import RUNS_FAILURE_CALLBACKS, load_dag, run_dag, task_states

DAG_ID = "outbox_relay_drain"


@pytest.fixture(scope="module")
def scenarios() -> dict[str, Any]:
    path = os.environ.get("OUTBOX_RELAY_AIRFLOW_SCENARIOS")
    if not path:
        pytest.fail("OUTBOX_RELAY_AIRFLOW_SCENARIOS is not set: this module runs from "
                    "tests/integration/test_airflow_dags.py, which seeds the outbox")
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _run(monkeypatch: pytest.MonkeyPatch, profile: str,
         mark_success: str | None = None) -> tuple[Any, dict[str, str]]:
    monkeypatch.setenv("OUTBOX_RELAY_PROFILE", profile)
    dag = load_dag(DAG_ID)
    assert dag.get_task("drain").application_args[:3] == ["--config", profile, "--available-now"]
    run = run_dag(dag, mark_success)
    return run, task_states(run)


def _left_over(run: Any) -> list[str] | None:
    with create_session() as session:
        rows = session.query(XComModel).filter_by(
            dag_id=DAG_ID, run_id=run.run_id, task_id="drain", key=LEFT_OVER_XCOM).all()
        return XComModel.deserialize_value(rows[0]) if rows else None


def test_migrate_then_drain_a_deimos_outbox(scenarios: dict[str, Any],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    run, states = _run(monkeypatch, scenarios["drain"]["profile"])

    assert states == {"migrate": "success", "drain": "success"}
    assert _left_over(run) is None


def test_migrate_then_drain_a_profile_of_several_databases(
        scenarios: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # Two Deimos outboxes named by the profile's [[databases]]: the migrate task migrates
    # both, the drain drains both (the caller reads back what each sent).
    run, states = _run(monkeypatch, scenarios["many"]["profile"])

    assert states == {"migrate": "success", "drain": "success"}
    assert _left_over(run) is None


def test_topics_left_over_are_a_success_with_a_warning(scenarios: dict[str, Any],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = scenarios["left_over"]

    # Its database is migrated already, and the other scenarios run the migrate task:
    # marking it saves a spark-submit on a 2-core CI machine.
    run, states = _run(monkeypatch, scenario["profile"], mark_success="migrate")

    assert states == {"migrate": "success", "drain": "success"}
    lines = _left_over(run)
    assert lines and all(line.startswith(LEFT_OVER_LINE) for line in lines)
    assert [scenario["locked_topic"] in line for line in lines] == [True]


def test_an_invalid_profile_fails_without_retries(scenarios: dict[str, Any],
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    run, states = _run(monkeypatch, scenarios["usage"]["profile"])

    assert states == {"migrate": "failed", "drain": "upstream_failed"}
    migrate = next(ti for ti in run.get_task_instances() if ti.task_id == "migrate")
    assert migrate.max_tries >= 2 and migrate.try_number == 1, \
        "exit 2 (USAGE) is not retried: failed at once"
    out = capfd.readouterr().out
    assert f"relay exit 2 (USAGE): {Outcome.FAIL.value}" in out
    if RUNS_FAILURE_CALLBACKS:  # dag_runs.py says why not on Airflow 3.0
        assert "outbox-relay: outbox_relay_drain.migrate failed" in out, "the notifier ran"


def test_a_bare_exit_1_is_retried_not_taken_for_topics_left_over(
        scenarios: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    # spark-submit refuses a master it cannot parse with exit 1, the number of
    # LEFT_OVER, before the relay runs: no left-over lines.
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_NO_MASTER",
                       json.dumps({"conn_type": "spark", "host": "no-such-master"}))
    monkeypatch.setenv("OUTBOX_RELAY_SPARK_CONN_ID", "spark_no_master")
    monkeypatch.setenv("OUTBOX_RELAY_PROFILE", scenarios["usage"]["profile"])
    dag = load_dag(DAG_ID)
    migrate = dag.get_task("migrate")
    migrate.retries, migrate.retry_delay = 1, timedelta(0)  # one quick retry, to count it

    run = run_dag(dag)

    assert task_states(run) == {"migrate": "failed", "drain": "upstream_failed"}
    (ti,) = [ti for ti in run.get_task_instances() if ti.task_id == "migrate"]
    assert ti.try_number == 2, "retried once"
    assert "relay exit 1 (without the relay's left-over lines" in capfd.readouterr().out

"""The Databricks DAG against a loopback stand-in of the Jobs API: the task triggers the
job by its id (the Variable), whatever development mode made of its name, waits for the
run deferred, succeeds when the run succeeds, and fails, with a notice to the failure
webhook, when the run fails."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.airflow.dag_runs import RUNS_FAILURE_CALLBACKS, load_dag, run_dag, task_states
from tests.airflow.jobs_api_standin import TOKEN, JobsApi, serve
from tests.airflow.webhook_receiver import Received, webhook_receiver

# What `databricks bundle deploy` names the job in a development target.
DEV_JOB_NAME = "[dev someone] outbox-relay drain"


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[JobsApi]:
    api = JobsApi(job_name=DEV_JOB_NAME)
    server = serve(api)
    host, port = server.server_address[:2]
    conn = {"conn_type": "databricks", "host": str(host), "port": port, "schema": "http",
            "password": TOKEN}
    monkeypatch.setenv("AIRFLOW_CONN_DATABRICKS_STANDIN", json.dumps(conn))
    monkeypatch.setenv("OUTBOX_RELAY_DATABRICKS_CONN_ID", "databricks_standin")
    # As `airflow variables set outbox_relay_databricks_job_id <id>` stores it: text.
    monkeypatch.setenv("AIRFLOW_VAR_OUTBOX_RELAY_DATABRICKS_JOB_ID", str(api.job_id))
    yield api
    server.shutdown()
    server.server_close()


@pytest.fixture
def webhook(monkeypatch: pytest.MonkeyPatch) -> Iterator[Received]:
    with webhook_receiver() as received:
        monkeypatch.setenv("AIRFLOW_CONN_RELAY_ALERTS",
                           json.dumps({"conn_type": "http", "host": received.url}))
        monkeypatch.setenv("OUTBOX_RELAY_ALERT_CONN_ID", "relay_alerts")
        yield received


def _run(api: JobsApi) -> dict[str, Any]:
    dag = load_dag("outbox_relay_databricks")
    for task in dag.tasks:
        task.polling_period_seconds = 0.2  # the stand-in's runs take six polls
        task.retries = 0  # one job run per test; the structure test checks the retries
    return task_states(run_dag(dag))


def test_the_task_triggers_the_job_by_id_and_succeeds_with_its_run(
        standin: JobsApi, webhook: Received, caplog: pytest.LogCaptureFixture) -> None:
    states = _run(standin)

    assert states == {"migrate_and_drain": "success"}
    assert [{k: str(v) for k, v in b.items()} for b in standin.run_nows()] == [
        {"job_id": str(standin.job_id)}]
    assert [p for m, p, b in standin.requests if p == "/api/2.2/jobs/list"] == []
    polls = [b for m, p, b in standin.requests if p == "/api/2.2/jobs/runs/get"]
    assert len(polls) >= standin.terminated_at_poll, "polled until the run terminated"
    # dag.test()'s own line when a task defers: it runs the trigger in this process.
    assert "[DAG TEST] running trigger in line" in caplog.text, "the wait deferred"
    assert webhook.bodies == []


def test_the_task_fails_with_its_run_and_notifies_the_webhook(
        standin: JobsApi, webhook: Received) -> None:
    standin.relay_fails = True

    states = _run(standin)

    assert states == {"migrate_and_drain": "failed"}
    assert len(standin.run_nows()) == 1
    if not RUNS_FAILURE_CALLBACKS:
        pytest.skip("this Airflow's dag.test() calls no on_failure_callback (dag_runs.py); "
                    "test_the_notifier_posts_a_final_failure calls the notifier itself")
    (notice,) = webhook.bodies
    assert (notice["dag_id"], notice["task_id"]) == ("outbox_relay_databricks", "migrate_and_drain")
    assert notice["text"].startswith(
        "outbox-relay: outbox_relay_databricks.migrate_and_drain failed")


def test_the_notifier_posts_a_final_failure(webhook: Received) -> None:
    """As a worker's task runner calls a task's on_failure_callback: with the context."""
    dag = load_dag("outbox_relay_databricks")
    (task,) = dag.tasks
    (notifier,) = task.on_failure_callback
    ti = SimpleNamespace(dag_id="outbox_relay_databricks", task_id=task.task_id,
                         run_id="scheduled__2026-01-01", try_number=2)

    notifier({"dag": dag, "ti": ti, "exception": RuntimeError("Job run failed")})

    (notice,) = webhook.bodies
    assert (notice["dag_id"], notice["try_number"]) == ("outbox_relay_databricks", 2)
    assert notice["text"] == ("outbox-relay: outbox_relay_databricks.migrate_and_drain failed "
                              "in run scheduled__2026-01-01 (try 2): Job run failed")

"""The Databricks DAG against a loopback stand-in of the Jobs API: the task succeeds
when the bundle's drain job run succeeds, and fails when the run fails."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.airflow.dag_runs import load_dag, run_dag, task_states
from tests.airflow.jobs_api_standin import TOKEN, JobsApi, serve

JOB_NAME = "outbox-relay drain"


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[JobsApi]:
    api = JobsApi(job_name=JOB_NAME)
    server = serve(api)
    host, port = server.server_address[:2]
    conn = {"conn_type": "databricks", "host": str(host), "port": port, "schema": "http",
            "password": TOKEN}
    monkeypatch.setenv("AIRFLOW_CONN_DATABRICKS_STANDIN", json.dumps(conn))
    monkeypatch.setenv("OUTBOX_RELAY_DATABRICKS_CONN_ID", "databricks_standin")
    yield api
    server.shutdown()
    server.server_close()


def _run(api: JobsApi) -> dict[str, Any]:
    dag = load_dag("outbox_relay_databricks")
    for task in dag.tasks:
        task.polling_period_seconds = 0.2  # the stand-in's runs take three polls
        task.retries = 0  # one job run per test; the structure test checks the retries
    return task_states(run_dag(dag))


def test_the_task_succeeds_when_the_job_run_succeeds(standin: JobsApi) -> None:
    states = _run(standin)

    assert states == {"migrate_and_drain": "success"}
    assert standin.run_nows() == [{"job_id": standin.job_id}]
    polls = [b for m, p, b in standin.requests if p == "/api/2.2/jobs/runs/get"]
    assert len(polls) >= 3, "polled until the run terminated"


def test_the_task_fails_when_the_job_run_fails(standin: JobsApi) -> None:
    standin.relay_fails = True

    states = _run(standin)

    assert states == {"migrate_and_drain": "failed"}
    assert len(standin.run_nows()) == 1
    outputs = [b for m, p, b in standin.requests if p == "/api/2.2/jobs/runs/get-output"]
    assert outputs, "the failed relay task's error was fetched for the task log"

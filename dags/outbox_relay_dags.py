"""The relay as scheduled Airflow DAGs: drain the outbox every 5 minutes, after `migrate`.

Two DAGs, alternatives (run one; they would share the outbox's topic locks and the
profile's checkpoint):

- ``outbox_relay_drain``: ``spark-submit jobs/migrate.py --config PROFILE``, then
  ``spark-submit jobs/relay.py --config PROFILE --available-now --time-budget-s 1620``
  (27 minutes, inside the task's 30-minute timeout), through
  ``RelaySparkSubmitOperator`` in client deploy mode, in the pool ``outbox_relay_spark``:
  client mode runs the driver's JVM on the Airflow worker, and the pool bounds how many
  run there at once. The migrate step runs the project's ``jobs/migrate.py`` (the same as
  ``outbox-relay migrate``) through the same operator rather than the CLI: it needs the
  relay's Python (not Airflow's: the two venvs conflict), profile, environment and
  network, as the drain does, which spark-submit already provides, and its exit codes
  go through the same table.
- ``outbox_relay_databricks``: the Databricks bundle's drain job
  (``resources/outbox_relay.job.yml``) through ``DatabricksRunNowOperator``, deferrable
  (the triggerer waits for the run, not a worker slot), by job id: development mode
  prefixes the deployed job's name, the id stays. That job runs migrate and then the
  available-now drain as tasks of one run on one job cluster, so migrate precedes the
  drain inside the run; a separate Airflow task for it would start
  a second cluster every 5 minutes. Pause the job's own schedule when Airflow triggers
  it (``--var drain_pause_status=PAUSED``).

Exit codes: each status of spark-submit takes the outcome the relay's one exit-code
policy gives it (``outbox_relay/exit_codes.py``, the table below; docs/exit-codes.md),
through ``outbox_relay_exits``:

- SUCCESS (0 OK) and WARN (1 LEFT_OVER) succeed. WARN logs a warning naming the topics
  left over and puts the relay's lines in the XCom ``left_over``. An exit 1 without
  those lines is spark-submit's or Python's own failure: retried.
- RETRY codes, and any status outside the table, take the task's retries.
- FAIL codes (2 USAGE, 10 MIGRATION_FAILED, 15 DEFECT, ...) fail at once: the task's
  ``retry_policy`` from Airflow 3.3, an ``AirflowFailException`` on 3.0 to 3.2.
- The Databricks task fails when the job's run fails: its entry point raises on RETRY
  and FAIL codes, after the job's own task retries.

Airflow 3.0.0 to 3.3.2 with the providers of requirements/airflow*.txt (docs/airflow.md).

A task that fails for good (retries spent, or not retried) calls
``RelayFailureNotifier``: a line in the task log, and a JSON POST to a webhook when
``OUTBOX_RELAY_ALERT_CONN_ID`` names an Airflow connection whose host is its URL.

Settings, read from the environment when the DAG file is parsed (none is a secret;
credentials stay in the Spark connection, the worker's environment or Databricks
secrets, as the profile's ``env:NAME`` references and ``RELAY_POSTGRES_PASSWORD`` do):

- ``OUTBOX_RELAY_HOME``: the checkout holding jobs/, outbox_relay/, conf/ (default: the
  parent of this file's folder).
- ``OUTBOX_RELAY_PROFILE``: the TOML profile (default ``conf/prod.toml`` under the home).
- ``OUTBOX_RELAY_SPARK_CONN_ID`` (default ``spark_default``): the master, e.g. a Spark
  connection with host ``local[2]`` or ``spark://host:7077``.
- ``OUTBOX_RELAY_SPARK_POOL`` (default ``outbox_relay_spark``): the pool of the
  spark-submit tasks; create it (``airflow pools set``) before the first run.
- ``OUTBOX_RELAY_PYSPARK_PYTHON``: the Python with the relay's dependencies, passed to
  spark-submit as ``PYSPARK_PYTHON`` (default: whatever the worker's environment says).
- ``OUTBOX_RELAY_DATABRICKS_CONN_ID`` (default ``databricks_default``).
- ``OUTBOX_RELAY_ALERT_CONN_ID`` (default: none, the task log only).

The Databricks job's id is the Airflow Variable ``outbox_relay_databricks_job_id``, read
when the task runs (``databricks bundle summary -o json`` prints it after a deploy).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.providers.databricks.operators.databricks import DatabricksRunNowOperator
from airflow.sdk import DAG

# The helper module sits beside this file. Not every process that parses DAGs puts the
# DAGs folder on sys.path (a bare DagBag does not), so this file does.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parent))

from outbox_relay_exits import RELAY_HOME
from outbox_relay_operators import RelayFailureNotifier, RelaySparkSubmitOperator

from outbox_relay.exit_codes import markdown_table  # on the path: outbox_relay_exits put it

PROFILE = os.environ.get("OUTBOX_RELAY_PROFILE") or str(RELAY_HOME / "conf" / "prod.toml")
SPARK_CONN_ID = os.environ.get("OUTBOX_RELAY_SPARK_CONN_ID") or "spark_default"
PYSPARK_PYTHON = os.environ.get("OUTBOX_RELAY_PYSPARK_PYTHON")
SPARK_POOL = os.environ.get("OUTBOX_RELAY_SPARK_POOL") or "outbox_relay_spark"
DATABRICKS_CONN_ID = os.environ.get("OUTBOX_RELAY_DATABRICKS_CONN_ID") or "databricks_default"
ALERT_CONN_ID = os.environ.get("OUTBOX_RELAY_ALERT_CONN_ID") or None
# A template, so the Variable is read when the task runs, not each time the file is parsed.
DATABRICKS_JOB_ID = "{{ var.value.outbox_relay_databricks_job_id }}"

# The UI's DAG docs: this docstring and the outcome of every code, from the table itself.
DOC_MD = f"{__doc__}\n{markdown_table()}\n"
EVERY_5_MINUTES = "*/5 * * * *"
START = pendulum.datetime(2026, 1, 1, tz="UTC")
# A failed drain is tried again soon: the next scheduled run is at most 5 minutes away.
# The notifier runs once a task has failed for good, not on each retry.
DEFAULT_ARGS = {"retries": 2, "retry_delay": timedelta(minutes=1),
                "on_failure_callback": [RelayFailureNotifier(ALERT_CONN_ID)]}
# The drain's time budget (docs/operating.md, "A drain's time budget"): past it the relay
# claims nothing new, finishes the rounds in flight and exits LEFT_OVER, a success with a
# warning here, and the next run goes on. The task's timeout stays above it by the margin
# that page gives (the writes in flight, up to kafka.delivery_timeout_ms's 120 s, and 60 s
# for the rest), so it is a safety net that never fires in normal operation.
DRAIN_TIMEOUT = timedelta(minutes=30)
DRAIN_BUDGET_S = int(DRAIN_TIMEOUT.total_seconds()) - 180


def _job(name: str) -> str:
    return str(Path(RELAY_HOME) / "jobs" / name)


with DAG(
    dag_id="outbox_relay_drain",
    description="Drain the PostgreSQL outbox to Kafka with spark-submit, after migrate",
    doc_md=DOC_MD,
    schedule=EVERY_5_MINUTES,
    start_date=START,
    catchup=False,  # a drain takes everything waiting: missed intervals need no run of their own
    max_active_runs=1,  # one drain at a time; the next waits instead of racing for the locks
    default_args=DEFAULT_ARGS,
    tags=["outbox-relay"],
) as spark_dag:
    env = {"PYSPARK_PYTHON": PYSPARK_PYTHON} if PYSPARK_PYTHON else None
    migrate = RelaySparkSubmitOperator(
        task_id="migrate",
        application=_job("migrate.py"),
        application_args=["--config", PROFILE],
        conn_id=SPARK_CONN_ID,
        env_vars=env,
        name="outbox-relay-migrate",
        pool=SPARK_POOL,
        execution_timeout=timedelta(minutes=10),
    )
    drain = RelaySparkSubmitOperator(
        task_id="drain",
        application=_job("relay.py"),
        application_args=["--config", PROFILE, "--available-now",
                          "--time-budget-s", str(DRAIN_BUDGET_S)],
        conn_id=SPARK_CONN_ID,
        env_vars=env,
        name="outbox-relay",
        pool=SPARK_POOL,
        execution_timeout=DRAIN_TIMEOUT,
    )
    migrate >> drain

with DAG(
    dag_id="outbox_relay_databricks",
    description="Drain the PostgreSQL outbox to Kafka with the Databricks bundle's drain job",
    doc_md=DOC_MD,
    schedule=EVERY_5_MINUTES,
    start_date=START,
    catchup=False,
    max_active_runs=1,  # the job itself allows one concurrent run (max_concurrent_runs: 1)
    # The job retries its relay task twice itself; Airflow's one retry is a new job run.
    default_args={**DEFAULT_ARGS, "retries": 1},
    tags=["outbox-relay", "databricks"],
) as databricks_dag:
    DatabricksRunNowOperator(
        task_id="migrate_and_drain",
        job_id=DATABRICKS_JOB_ID,
        databricks_conn_id=DATABRICKS_CONN_ID,
        # The triggerer polls the run; no worker slot waits for it.
        deferrable=True,
        polling_period_seconds=30,
        # The job has its own timeout (3600 s) and task retries; this only bounds the wait.
        execution_timeout=timedelta(minutes=70),
    )

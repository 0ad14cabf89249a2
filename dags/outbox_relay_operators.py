"""The spark-submit operator the drain DAG runs, and the notifier of its failures.

`RelaySparkSubmitOperator` starts spark-submit itself and reads the exit status from the
process it started: the Spark provider's operator hides the process and its output
behind private names, which changed between the provider's releases. What the provider
still gives is its connection type: the master is read from a Spark connection as the
provider documents it (host, optional port, the ``deploy-mode`` and ``spark-binary``
extras). Each status goes through the relay's exit-code policy (`outbox_relay_exits`);
docs/exit-codes.md prints it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

# The providers' layer over names that moved between Airflow 3 releases (BaseHook came to
# airflow.sdk in 3.1; 3.0.0's airflow.sdk names a BaseNotifier module it lacks).
from airflow.providers.common.compat.notifier import BaseNotifier
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    BaseHook,
    BaseOperator,
    Connection,
)
from outbox_relay_exits import (
    LEFT_OVER_LINE,
    LEFT_OVER_XCOM,
    RETRY_POLICY,
    describe,
    exit_error,
)

# The launchers the provider's Spark connection accepts in its spark-binary extra.
SPARK_BINARIES = ("spark-submit", "spark2-submit", "spark3-submit")


def spark_master(conn: Connection) -> str:
    """The master of a Spark connection, read as the provider documents the connection:
    the host is the master (``local[2]``, ``yarn``, ``spark://host``, ``k8s://https://...``),
    or a bare host name that the connection type's scheme prefixes; a port is appended."""
    host = (conn.host or "").strip()
    if not host:
        raise AirflowFailException(f"Spark connection {conn.conn_id!r} has no host: set the master")
    master = host if "://" in host or not conn.port else f"{conn.conn_type}://{host}"
    return f"{master}:{conn.port}" if conn.port else master


def spark_submit_command(conn: Connection, application: str, application_args: Sequence[str],
                         name: str) -> list[str]:
    """spark-submit in client deploy mode: there it exits with the driver's (the relay's)
    code, which cluster mode would leave on the cluster."""
    extra = conn.extra_dejson
    mode = extra.get("deploy-mode") or "client"
    if mode != "client":
        raise AirflowFailException(
            f"Spark connection {conn.conn_id!r} sets deploy-mode {mode!r}: the relay's exit "
            "code reaches Airflow in client mode only")
    binary = extra.get("spark-binary") or SPARK_BINARIES[0]
    if binary not in SPARK_BINARIES:
        raise AirflowFailException(f"spark-binary must be one of {', '.join(SPARK_BINARIES)}")
    return [binary, "--master", spark_master(conn), "--deploy-mode", "client", "--name", name,
            application, *application_args]


class RelaySparkSubmitOperator(BaseOperator):
    """Runs ``spark-submit APPLICATION ARGS`` and carries out its exit status's outcome.

    Left-over topics (exit 1 with the relay's lines) succeed with a warning and the lines
    in the XCom ``left_over``; a failure raises `RelayExitNotRetried` (failed at once:
    `RETRY_POLICY`, or before Airflow 3.3 an AirflowFailException) or `RelayExitRetried`.
    On a kill (a timeout, a task marked failed) spark-submit first gets SIGTERM, the
    relay's graceful stop, and SIGKILL only after `stop_grace_s`.
    """

    template_fields: Sequence[str] = ("application", "application_args", "env_vars", "name")

    def __init__(self, *, application: str, application_args: Sequence[str] = (),
                 conn_id: str = "spark_default", name: str = "outbox-relay",
                 env_vars: Mapping[str, str] | None = None, stop_grace_s: float = 45.0,
                 **kwargs: Any) -> None:
        if RETRY_POLICY is not None:  # Airflow 3.3 and later
            kwargs.setdefault("retry_policy", RETRY_POLICY)
        super().__init__(**kwargs)
        self.application = application
        self.application_args = list(application_args)
        self.conn_id = conn_id
        self.name = name
        self.env_vars = dict(env_vars or {})
        self.stop_grace_s = stop_grace_s
        self._spark_submit: subprocess.Popen[str] | None = None

    def execute(self, context: Any) -> None:
        command = spark_submit_command(BaseHook.get_connection(self.conn_id), self.application,
                                       self.application_args, self.name)
        # Logged whole: the command holds paths and names; credentials come from the
        # environment and the profile's env:NAME references.
        self.log.info("running %s", shlex.join(command))
        returncode, left_over = self._watch_spark_submit(command)
        error = exit_error(returncode, left_over)
        if error is not None:
            raise error
        if left_over:
            self.log.warning("relay exit %d (%s): %s. Counted as a success; see "
                             "`outbox-relay topics`.", returncode, describe(returncode, left_over),
                             "; ".join(left_over))
            # For a downstream alert, or a look in the UI: which topics, and why.
            context["ti"].xcom_push(key=LEFT_OVER_XCOM, value=left_over)

    def _watch_spark_submit(self, command: list[str]) -> tuple[int, list[str]]:
        """Runs `command`, logging its output line by line; returns its exit status and
        the relay's left-over lines."""
        env = {**os.environ, **{k: str(v) for k, v in self.env_vars.items()}}
        try:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, errors="replace", env=env)
        except FileNotFoundError as exc:
            raise AirflowException(f"{command[0]} is not on the worker's PATH") from exc
        self._spark_submit = process
        left_over: list[str] = []
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.rstrip("\n")
            self.log.info("%s", line)
            if line.strip().startswith(LEFT_OVER_LINE):
                left_over.append(line.strip())
        return process.wait(), left_over

    def on_kill(self) -> None:
        process = self._spark_submit
        if process is None or process.poll() is not None:
            return
        self.log.info("SIGTERM to spark-submit: the relay stops gracefully")
        process.terminate()
        try:
            process.wait(timeout=self.stop_grace_s)
        except subprocess.TimeoutExpired:
            self.log.warning("spark-submit still running after %.0f s: SIGKILL", self.stop_grace_s)
            process.kill()
            process.wait()


class RelayFailureNotifier(BaseNotifier):
    """A task's final failure (after its retries, or at once when not retried): one line
    in the task log, and a JSON POST to a webhook when `conn_id` names one.

    The webhook is an Airflow connection whose host is the URL (it holds a secret, so it
    is no DAG setting). The body's ``text`` is the line, the field incoming webhooks of
    chat tools read; the other fields are for an alert router.
    """

    def __init__(self, conn_id: str | None = None) -> None:
        super().__init__()
        self.conn_id = conn_id

    def notify(self, context: Any) -> None:
        ti = context["ti"]
        exception = context.get("exception")
        text = (f"outbox-relay: {ti.dag_id}.{ti.task_id} failed in run {ti.run_id} "
                f"(try {ti.try_number}): {exception}")
        self.log.error("%s", text)
        if not self.conn_id:
            return
        body = {"text": text, "dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id,
                "try_number": ti.try_number, "returncode": getattr(exception, "returncode", None),
                "exception": str(exception)}
        request = urllib.request.Request(
            webhook_url(BaseHook.get_connection(self.conn_id)), method="POST",
            data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                response.read()
        except OSError as exc:  # the failure itself is recorded; a lost alert must not hide it
            self.log.warning("failure webhook %r not reached: %s", self.conn_id, exc)


def webhook_url(conn: Connection) -> str:
    host = (conn.host or "").strip()
    if "://" in host:
        return host
    port = f":{conn.port}" if conn.port else ""
    return f"{conn.schema or 'https'}://{host}{port}"

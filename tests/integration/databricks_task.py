"""A bundle job's python_wheel_task run on the local stack as Databricks runs it.

The job cluster's spark_env_vars become the environment (its `{{secrets/...}}` cannot
resolve here; the local stack needs none). The task runs under a real spark-submit
through a launcher that does what Databricks' does: it finds the task's entry point by
name among the installed distribution's entry points, sets `sys.argv` to the task's
parameters and calls it, dropping what it returns. `${workspace.file_path}` names a
stand-in for the synced files whose conf/databricks.toml is the bundle's profile adapted
to the local stack (no TLS, no SASL). The jars come from the local cache
(outbox_relay.launch.spark_jars, what `outbox-relay jars` prints) as `--jars`, as a
cluster's libraries do: the bundle's Maven libraries, and what a Databricks Runtime
ships itself (the Kafka connector, Delta), which a local Spark lacks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from outbox_relay.launch.spark_jars import cached_jars
from tests.bundle import PROFILE, task_parameters
from tests.integration.process import write_raw_profile

SECURITY_PREFIXES = ("security.", "sasl.", "ssl.")
# Databricks' wheel launcher, reduced to what decides the outcome: the entry point is
# looked up by name in the distribution's metadata and called; what it returns is dropped,
# so only an exception fails the task (the CLI's python_wheel_wrapper does the same).
LAUNCHER = """\
import sys
from importlib import metadata

package, name, *parameters = sys.argv[1:]
sys.argv = [package, *parameters]
(entry,) = [ep for ep in metadata.distribution(package).entry_points if ep.name == name]
entry.load()()
"""


def jar_of(coordinate: str, jars: list[Path]) -> Path:
    """The cached jar of a Maven coordinate group:artifact:version."""
    _, artifact, version = coordinate.split(":")
    found = [p for p in jars if p.name == f"{artifact}-{version}.jar"]
    assert len(found) == 1, f"{coordinate}: one cached jar expected, got {found}"
    return found[0]


class TaskRunner:
    """Runs the tasks of one job, as its job cluster would, from files under `root`."""

    def __init__(self, job: dict[str, Any], root: Path,
                 profile_changes: dict[str, Any] | None = None) -> None:
        self.profile = self._local_profile(profile_changes or {})
        self.workspace = root / "files"
        (self.workspace / "conf").mkdir(parents=True)
        write_raw_profile(self.profile, self.workspace / "conf" / PROFILE.name)
        self.launcher = root / "wheel_launcher.py"
        self.launcher.write_text(LAUNCHER, encoding="utf-8")
        self.jars = cached_jars()
        self.env = self._cluster_env(job, root / "spark-conf")

    @staticmethod
    def _local_profile(changes: dict[str, Any]) -> dict[str, Any]:
        """The conf/databricks.toml the job's parameters find in the synced files: the
        bundle's profile with only what the local stack needs changed, and `changes`
        (section by section). The stack speaks plaintext, and Databricks' shaded login
        module (kafkashaded....) loads only inside its own Kafka connector."""
        data: dict[str, Any] = tomllib.loads(PROFILE.read_text(encoding="utf-8"))
        data["postgres"]["sslmode"] = "disable"
        for table in ("java_options", "librdkafka_options"):
            options = data["kafka"].get(table, {})
            data["kafka"][table] = {k: v for k, v in options.items()
                                    if not k.startswith(SECURITY_PREFIXES)}
        assert data["spark"]["resolve_packages"] is False, "a cluster's jars are its libraries"
        for section, values in changes.items():
            if isinstance(values, list):  # an array of tables: [[databases]]
                data[section] = values
            else:
                data.setdefault(section, {}).update(values)
        return data

    @staticmethod
    def _cluster_env(job: dict[str, Any], spark_conf: Path) -> dict[str, str]:
        """The process environment of the job cluster, less what only a workspace
        resolves. An empty Spark configuration directory: a cluster has no
        spark-defaults.conf of ours (`outbox-relay jars --install` writes the jars into
        the local one)."""
        (cluster,) = [c["new_cluster"] for c in job["job_clusters"]]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "KAFKA_"))}
        env.update({k: v for k, v in cluster["spark_env_vars"].items()
                    if not v.startswith("{{secrets/")})
        spark_conf.mkdir()
        env["SPARK_CONF_DIR"] = str(spark_conf)
        env["PYSPARK_PYTHON"] = sys.executable
        return env

    def start(self, task: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
        """The task's spark-submit, leader of a process group of its own."""
        submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent))
        assert submit, "spark-submit is installed with pyspark"
        wheel_task = task["python_wheel_task"]
        command = [submit, "--master", "local[2]", "--jars", ",".join(map(str, self.jars)),
                   str(self.launcher), wheel_task["package_name"], wheel_task["entry_point"],
                   *task_parameters(task, self.workspace)]
        with log.open("wb") as out:
            return subprocess.Popen(command, cwd=self.workspace, env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def run(self, task: dict[str, Any], log: Path, timeout_s: float = 900) -> int:
        """Runs the task to its end: its exit code."""
        proc = self.start(task, log)
        try:
            return proc.wait(timeout=timeout_s)
        finally:
            if proc.poll() is None:
                proc.kill()

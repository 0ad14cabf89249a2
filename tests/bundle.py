"""The Databricks bundle as the CLI would see it, read offline: variables resolved.

Shared by the offline checks (tests/unit/test_databricks_bundle.py) and the emulation of
the drain task on the local stack (tests/integration/test_databricks_drain.py), so both
read the same jobs the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "conf" / "databricks.toml"
JOBS = ("outbox_relay_drain", "outbox_relay_continuous")
VAR = re.compile(r"\$\{var\.([A-Za-z0-9_]+)\}")
# Where `databricks bundle deploy` syncs the repository's files in the workspace.
WORKSPACE_FILES = "${workspace.file_path}"


def _resolve(node: Any, variables: Mapping[str, Any]) -> Any:
    if isinstance(node, dict):
        return {k: _resolve(v, variables) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, variables) for v in node]
    if not isinstance(node, str):
        return node
    whole = VAR.fullmatch(node)
    if whole:
        return _resolve(variables[whole[1]], variables)
    return VAR.sub(lambda m: str(_resolve(variables[m[1]], variables)), node)


def variable_defaults() -> dict[str, Any]:
    root = yaml.safe_load((REPO / "databricks.yml").read_text(encoding="utf-8"))
    return {name: spec["default"] for name, spec in root.get("variables", {}).items()}


@dataclass(frozen=True)
class Bundle:
    jobs: dict[str, Any]
    # The file each job was defined in: its relative paths are relative to that file.
    defined_in: dict[str, Path]

    def tasks(self, job_key: str) -> dict[str, dict[str, Any]]:
        return {t["task_key"]: t for t in self.jobs[job_key]["tasks"]}

    def script_task(self, job_key: str, script: str) -> dict[str, Any]:
        """The one spark_python_task of `job_key` whose python_file is jobs/<script>."""
        found = [
            t for t in self.tasks(job_key).values()
            if "spark_python_task" in t and self.python_file(job_key, t) == REPO / "jobs" / script
        ]
        assert len(found) == 1, f"{job_key}: one spark_python_task on jobs/{script}, got {found}"
        return found[0]

    def python_file(self, job_key: str, task: Mapping[str, Any]) -> Path:
        return (self.defined_in[job_key] / task["spark_python_task"]["python_file"]).resolve()


def load_bundle(overrides: Mapping[str, Any] | None = None) -> Bundle:
    """Every job of the bundle, its `${var.*}` resolved from the defaults (and overrides,
    as `--var name=value` would)."""
    root = yaml.safe_load((REPO / "databricks.yml").read_text(encoding="utf-8"))
    variables = {**variable_defaults(), **(overrides or {})}
    jobs: dict[str, Any] = {}
    where: dict[str, Path] = {}
    for pattern in root.get("include", []):
        for path in sorted(REPO.glob(pattern)):
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            for key, job in doc.get("resources", {}).get("jobs", {}).items():
                assert key not in jobs, f"job {key} defined twice"
                jobs[key] = _resolve(job, variables)
                where[key] = path.parent
    return Bundle(jobs, where)


def task_parameters(task: Mapping[str, Any], workspace_files: Path = REPO) -> list[str]:
    """The task's parameters with `${workspace.file_path}` set to where the files are."""
    return [p.replace(WORKSPACE_FILES, str(workspace_files))
            for p in task["spark_python_task"]["parameters"]]


def maven_coordinates(task: Mapping[str, Any]) -> set[str]:
    return {lib["maven"]["coordinates"] for lib in task["libraries"] if "maven" in lib}

"""The Databricks bundle as the CLI would see it for one target, read offline.

`${var.*}`, `${bundle.target}` and `${bundle.name}` are resolved: the variables from their
defaults, then the target's `variables`, then overrides (as `--var name=value`).
`${workspace.*}` is left as written: only a workspace knows it.

Shared by the offline checks (tests/unit/test_databricks_bundle.py) and the emulation of
the drain job on the local stack (tests/integration/test_databricks_drain.py), so both
read the same jobs the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from outbox_relay.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "conf" / "databricks.toml"
JOBS = ("outbox_relay_migrate", "outbox_relay_drain", "outbox_relay_continuous")
TARGETS = ("dev", "prod")
REF = re.compile(r"\$\{((?:var|bundle)\.[A-Za-z0-9_]+)\}")
# Where `databricks bundle deploy` syncs the repository's files in the workspace.
WORKSPACE_FILES = "${workspace.file_path}"


def root_config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((REPO / "databricks.yml").read_text("utf-8"))
    return config


def default_target() -> str:
    (name,) = [k for k, t in root_config()["targets"].items() if t.get("default")]
    return str(name)


def _resolve(node: Any, refs: Mapping[str, Any]) -> Any:
    if isinstance(node, dict):
        return {k: _resolve(v, refs) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, refs) for v in node]
    if not isinstance(node, str):
        return node
    whole = REF.fullmatch(node)
    if whole:
        return _resolve(refs[whole[1]], refs)
    return REF.sub(lambda m: str(_resolve(refs[m[1]], refs)), node)


def variable_defaults(target: str | None = None) -> dict[str, Any]:
    """Each variable's default, as the target overrides it."""
    root = root_config()
    values = {name: spec["default"] for name, spec in root.get("variables", {}).items()}
    overrides = root["targets"][target or default_target()].get("variables") or {}
    assert set(overrides) <= set(values), f"undeclared variables: {set(overrides) - set(values)}"
    return {**values, **overrides}


@dataclass(frozen=True)
class Bundle:
    target: str
    jobs: dict[str, Any]
    # The file each job was defined in: its relative paths are relative to that file.
    defined_in: dict[str, Path]
    # The target's own mapping (mode, workspace, run_as, ...) and the bundle-wide
    # permissions, resolved like the jobs.
    settings: dict[str, Any]
    permissions: list[dict[str, Any]]

    def tasks(self, job_key: str) -> dict[str, dict[str, Any]]:
        return {t["task_key"]: t for t in self.jobs[job_key]["tasks"]}

    def command_task(self, job_key: str, command: str) -> dict[str, Any]:
        """The one task of `job_key` that runs `outbox-relay <command>`."""
        found = [t for t in self.tasks(job_key).values() if task_command(t) == command]
        assert len(found) == 1, f"{job_key}: one task running {command!r}, got {found}"
        return found[0]

    def trigger_pause_status(self, job_key: str) -> str | None:
        job = self.jobs[job_key]
        trigger = job.get("continuous") or job.get("schedule") or job.get("trigger")
        return None if trigger is None else trigger.get("pause_status")


def load_bundle(overrides: Mapping[str, Any] | None = None,
                target: str | None = None) -> Bundle:
    """Every job of the bundle for `target` (default: the bundle's default target)."""
    root = root_config()
    name = target or default_target()
    variables = {**variable_defaults(name), **(overrides or {})}
    refs = {f"var.{k}": v for k, v in variables.items()}
    refs |= {"bundle.target": name, "bundle.name": root["bundle"]["name"]}
    jobs: dict[str, Any] = {}
    where: dict[str, Path] = {}
    for pattern in root.get("include", []):
        for path in sorted(REPO.glob(pattern)):
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            for key, job in doc.get("resources", {}).get("jobs", {}).items():
                assert key not in jobs, f"job {key} defined twice"
                jobs[key] = _resolve(job, refs)
                where[key] = path.parent
    settings = _resolve(root["targets"][name], refs)
    permissions = _resolve(settings.get("permissions", root.get("permissions", [])), refs)
    return Bundle(name, jobs, where, settings, permissions)


def task_parameters(task: Mapping[str, Any], workspace_files: Path = REPO) -> list[str]:
    """The task's parameters with `${workspace.file_path}` set to where the files are."""
    return [p.replace(WORKSPACE_FILES, str(workspace_files))
            for p in task["python_wheel_task"]["parameters"]]


def task_command(task: Mapping[str, Any]) -> str:
    """The `outbox-relay` sub-command a task's parameters run, read by the CLI's parser."""
    return str(build_parser().parse_args(task_parameters(task)).command)


def maven_coordinates(task: Mapping[str, Any]) -> set[str]:
    return {lib["maven"]["coordinates"] for lib in task["libraries"] if "maven" in lib}

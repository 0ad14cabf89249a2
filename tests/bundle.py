"""The Databricks bundle as the CLI would see it for one target, read offline.

`${var.*}`, `${bundle.target}` and `${bundle.name}` are resolved: the variables from their
defaults, then the target's `variables`, then overrides (as `--var name=value`); a
variable left without a value fails as the CLI's does, naming it. The target's
`resources` are merged over the included files' (mappings key by key, as the CLI's
MergeTargetOverrides does). `${workspace.*}` is left as written: only a workspace knows it.

Shared by the offline checks (tests/unit/test_databricks_*.py) and the emulations on the
local stack (tests/integration/test_databricks_*.py), so all read the bundle the same way.
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
APPS = ("outbox_relay_metrics",)
# The resource types the bundle defines; another would go unchecked by these tests.
RESOURCE_TYPES = ("jobs", "apps")
TARGETS = ("dev", "prod")
# What a deployer passes (`--var`, BUNDLE_VAR_*, or .databricks/bundle/<target>/
# variable-overrides.json) for the variables the bundle leaves without a default.
DEPLOY_VARS = {
    "postgres_url": "postgresql://outbox_relay@db.internal:5432/app",
    "kafka_bootstrap_servers": "kafka-1.internal:9093",
    "alert_email": "relay-oncall@corp.internal",
    "run_as_service_principal": "6f1e5a2c-0000-4000-8000-00000000abcd",
}
REF = re.compile(r"\$\{((?:var|bundle)\.[A-Za-z0-9_]+)\}")
# Where `databricks bundle deploy` syncs the repository's files in the workspace.
WORKSPACE_FILES = "${workspace.file_path}"


class MissingVariable(LookupError):
    """A variable with no default and no value: the CLI refuses to deploy."""


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


def _merge(base: Any, override: Any, where: str) -> Any:
    """A target's override merged into the included definition, mapping by mapping."""
    if isinstance(base, dict) and isinstance(override, dict):
        return {**base, **{k: _merge(base[k], v, f"{where}.{k}") if k in base else v
                           for k, v in override.items()}}
    # The CLI merges sequences by key (tasks by task_key, ...): not emulated here.
    assert not isinstance(override, list), f"{where}: a target overrides a list"
    return override


def variable_values(target: str | None = None,
                    overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Each variable's value: its default, as the target overrides it, then `overrides`.

    A variable left without one raises MissingVariable with the CLI's own message
    (bundle/config/mutator/set_variables.go)."""
    root = root_config()
    declared = root.get("variables", {})
    target_vars = root["targets"][target or default_target()].get("variables") or {}
    unknown = (set(target_vars) | set(overrides or {})) - set(declared)
    assert not unknown, f"undeclared variables: {unknown}"
    values = {name: spec["default"] for name, spec in declared.items() if "default" in spec}
    values |= {**target_vars, **(overrides or {})}
    for name in declared:
        if name not in values:
            raise MissingVariable(f"no value assigned to required variable {name}")
    return values


@dataclass(frozen=True)
class Bundle:
    target: str
    jobs: dict[str, Any]
    apps: dict[str, Any]
    # The file each resource was defined in: its relative paths are relative to that file.
    defined_in: dict[str, Path]
    # The target's own mapping (mode, workspace, ...) and the bundle-wide permissions,
    # resolved like the resources.
    settings: dict[str, Any]
    permissions: list[dict[str, Any]]
    # The bundle-wide run_as after the target's (which replaces the root's), or None.
    run_as: dict[str, Any] | None

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


def _included_resources() -> tuple[dict[str, dict[str, Any]], dict[str, Path]]:
    resources: dict[str, dict[str, Any]] = {kind: {} for kind in RESOURCE_TYPES}
    where: dict[str, Path] = {}
    for pattern in root_config().get("include", []):
        for path in sorted(REPO.glob(pattern)):
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            for kind, defined in doc.get("resources", {}).items():
                assert kind in RESOURCE_TYPES, f"{path.name}: {kind} goes unchecked"
                for key, resource in defined.items():
                    assert key not in where, f"resource {key} defined twice"
                    resources[kind][key] = resource
                    where[key] = path.parent
    return resources, where


def load_bundle(overrides: Mapping[str, Any] | None = None,
                target: str | None = None) -> Bundle:
    """Every resource of the bundle for `target` (default: the bundle's default target),
    with `overrides` as `--var`; DEPLOY_VARS stand for what a deployer passes."""
    root = root_config()
    name = target or default_target()
    variables = variable_values(name, {**DEPLOY_VARS, **(overrides or {})})
    refs = {f"var.{k}": v for k, v in variables.items()}
    refs |= {"bundle.target": name, "bundle.name": root["bundle"]["name"]}
    included, where = _included_resources()
    target_settings = root["targets"][name]
    merged = _merge(included, target_settings.get("resources", {}), "resources")
    settings = _resolve({k: v for k, v in target_settings.items() if k != "resources"}, refs)
    permissions = _resolve(settings.get("permissions", root.get("permissions", [])), refs)
    run_as = _resolve(target_settings.get("run_as", root.get("run_as")), refs)
    return Bundle(name, _resolve(merged["jobs"], refs), _resolve(merged["apps"], refs), where,
                  settings, permissions, run_as)


def task_parameters(task: Mapping[str, Any], workspace_files: Path = REPO) -> list[str]:
    """The task's parameters with `${workspace.file_path}` set to where the files are."""
    return [p.replace(WORKSPACE_FILES, str(workspace_files))
            for p in task["python_wheel_task"]["parameters"]]


def task_command(task: Mapping[str, Any]) -> str:
    """The `outbox-relay` sub-command a task's parameters run, read by the CLI's parser."""
    return str(build_parser().parse_args(task_parameters(task)).command)


def maven_coordinates(task: Mapping[str, Any]) -> set[str]:
    return {lib["maven"]["coordinates"] for lib in task["libraries"] if "maven" in lib}

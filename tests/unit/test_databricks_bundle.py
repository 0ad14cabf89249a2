"""The Databricks bundle, validated offline (no workspace, no CLI).

"Valid" means: every job passes the `databricks-bundles` package's own model after the
bundle's variables are resolved with their defaults, and the project's rules hold.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from databricks.bundles.jobs import Job

from relay.app import parser
from relay.cli import build_parser
from relay.config_load import PASSWORD_ENV, load_config
from relay.packages import SPARK_PACKAGES
from relay.spark import REDACTION_REGEX

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "conf" / "databricks.toml"
JOBS = ("outbox_relay_drain", "outbox_relay_continuous")
VAR = re.compile(r"\$\{var\.([A-Za-z0-9_]+)\}")
# Where `databricks bundle deploy` syncs the repository; here, the checkout itself.
WORKSPACE_FILES = "${workspace.file_path}"
SECRET_REF = re.compile(r"^\{\{secrets/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+\}\}$")
ENV_REF = "env:"


def _resolve(node: Any, variables: dict[str, Any]) -> Any:
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


def _load_bundle() -> tuple[dict[str, Any], dict[str, Path]]:
    """The resolved jobs, and the file each was defined in (paths are relative to it)."""
    root = yaml.safe_load((REPO / "databricks.yml").read_text(encoding="utf-8"))
    variables = {name: spec["default"] for name, spec in root.get("variables", {}).items()}
    jobs: dict[str, Any] = {}
    where: dict[str, Path] = {}
    for pattern in root.get("include", []):
        for path in sorted(REPO.glob(pattern)):
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            for key, job in doc.get("resources", {}).get("jobs", {}).items():
                assert key not in jobs, f"job {key} defined twice"
                jobs[key] = _resolve(job, variables)
                where[key] = path.parent
    return jobs, where


BUNDLE, DEFINED_IN = _load_bundle()


def _tasks(job_key: str) -> dict[str, dict[str, Any]]:
    return {t["task_key"]: t for t in BUNDLE[job_key]["tasks"]}


def _script_task(job_key: str, script: str) -> dict[str, Any]:
    found = [
        t for t in _tasks(job_key).values()
        if "spark_python_task" in t
        and (DEFINED_IN[job_key] / t["spark_python_task"]["python_file"]).resolve()
        == REPO / "jobs" / script
    ]
    assert len(found) == 1, f"{job_key}: one spark_python_task on jobs/{script}, got {found}"
    return found[0]


def _parameters(task: dict[str, Any]) -> list[str]:
    return [p.replace(WORKSPACE_FILES, str(REPO)) for p in task["spark_python_task"]["parameters"]]


def _profile_env_secrets() -> set[str]:
    """Every environment variable the profile reads a secret from."""
    raw = tomllib.loads(PROFILE.read_text(encoding="utf-8"))
    names = {PASSWORD_ENV}
    for table in ("java_options", "librdkafka_options"):
        for value in raw.get("kafka", {}).get(table, {}).values():
            if value.startswith(ENV_REF):
                names.add(value.removeprefix(ENV_REF))
    return names


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """What the cluster's secrets would put in the environment: placeholders here.

    Passed as load_config's env too, so that no RELAY_* address of the shell leaks in.
    """
    env = {name: f"placeholder-{name.lower()}" for name in _profile_env_secrets()}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def test_the_bundle_defines_both_jobs() -> None:
    assert sorted(BUNDLE) == sorted(JOBS)


@pytest.mark.parametrize("job_key", JOBS)
def test_every_job_passes_the_bundle_model(job_key: str) -> None:
    job = Job.from_dict(BUNDLE[job_key])
    assert job.as_dict() == BUNDLE[job_key], "the model dropped or changed a field"


@pytest.mark.parametrize("job_key", JOBS)
def test_continuous_xor_schedule_and_one_run_at_a_time(job_key: str) -> None:
    job = BUNDLE[job_key]
    assert ("continuous" in job) != ("schedule" in job)
    assert job["max_concurrent_runs"] == 1


def test_exactly_one_job_is_unpaused() -> None:
    status = {k: (j.get("continuous") or j["schedule"])["pause_status"] for k, j in BUNDLE.items()}
    assert sorted(status.values()) == ["PAUSED", "UNPAUSED"], status
    assert status["outbox_relay_drain"] == "UNPAUSED"


def test_the_drain_is_scheduled_with_retries_and_a_timeout() -> None:
    job = BUNDLE["outbox_relay_drain"]
    relay_task = _script_task("outbox_relay_drain", "relay.py")
    assert job["schedule"]["quartz_cron_expression"]
    assert "--available-now" in relay_task["spark_python_task"]["parameters"]
    assert relay_task["max_retries"] >= 1
    assert 0 < relay_task["timeout_seconds"] <= job["timeout_seconds"]
    assert "--available-now" not in _parameters(_script_task("outbox_relay_continuous", "relay.py"))


@pytest.mark.parametrize("job_key", JOBS)
def test_every_secret_the_profile_reads_comes_from_a_databricks_secret(job_key: str) -> None:
    clusters = [c["new_cluster"] for c in BUNDLE[job_key]["job_clusters"]]
    for cluster in clusters:
        env = cluster.get("spark_env_vars", {})
        for name in sorted(_profile_env_secrets()):
            assert SECRET_REF.match(env.get(name, "")), f"{job_key}: {name} is {env.get(name)!r}"


def _string_leaves(node: Any, key: str = "") -> list[tuple[str, str]]:
    if isinstance(node, dict):
        return [leaf for k, v in node.items() for leaf in _string_leaves(v, str(k))]
    if isinstance(node, list):
        return [leaf for v in node for leaf in _string_leaves(v, key)]
    return [(key, node)] if isinstance(node, str) else []


def test_nothing_secret_is_written_in_the_bundle_or_the_profile() -> None:
    secret_key = re.compile(REDACTION_REGEX)
    profile = tomllib.loads(PROFILE.read_text(encoding="utf-8"))
    leaves = _string_leaves(BUNDLE) + _string_leaves(profile)
    named = [(k, v) for k, v in leaves if secret_key.search(k)]
    assert named, "the check found no secret-looking key at all"
    for key, value in named:
        assert SECRET_REF.match(value) or value.startswith(ENV_REF), f"{key} = {value!r}"
    for key, value in leaves:
        assert not re.search(r"(?i)password\s*=|:[^/@\s]+@", value), f"{key} = {value!r}"


@pytest.mark.parametrize("job_key", JOBS)
def test_relay_parameters_parse_and_name_a_profile_that_loads(
    job_key: str, secret_env: dict[str, str]
) -> None:
    args = parser().parse_args(_parameters(_script_task(job_key, "relay.py")))
    assert Path(args.config).resolve() == PROFILE
    config = load_config(args.config, env=secret_env)
    assert config.spark.master is None
    assert config.spark.resolve_packages is False
    assert config.ledger.path.startswith("/Volumes/")
    assert config.relay.checkpoint_path.startswith("/Volumes/")


@pytest.mark.parametrize("job_key", JOBS)
def test_migrate_runs_the_cli_migrate_on_the_same_profile(
    job_key: str, secret_env: dict[str, str]
) -> None:
    import runpy

    task = _script_task(job_key, "migrate.py")
    script = runpy.run_path(str(REPO / "jobs" / "migrate.py"), run_name="not_main")
    args = build_parser().parse_args([*_parameters(task), script["COMMAND"]])
    assert args.command == "migrate"
    assert Path(args.config).resolve() == PROFILE
    load_config(args.config, env=secret_env)


@pytest.mark.parametrize("job_key", JOBS)
def test_migrate_comes_before_the_relay(job_key: str) -> None:
    migrate = _script_task(job_key, "migrate.py")
    relay_task = _script_task(job_key, "relay.py")
    assert not migrate.get("depends_on")
    assert relay_task["depends_on"] == [{"task_key": migrate["task_key"]}]


@pytest.mark.parametrize("job_key", JOBS)
def test_libraries_are_the_wheel_and_only_packages_the_runtime_lacks(job_key: str) -> None:
    for task in (_script_task(job_key, "migrate.py"), _script_task(job_key, "relay.py")):
        libraries = task["libraries"]
        wheels = [lib["whl"] for lib in libraries if "whl" in lib]
        maven = {lib["maven"]["coordinates"] for lib in libraries if "maven" in lib}
        assert len(wheels) == 1 and wheels[0].endswith(".whl")
        assert maven <= set(SPARK_PACKAGES), maven - set(SPARK_PACKAGES)
        assert len(libraries) == len(wheels) + len(maven)


"""The bundle against Databricks' own documentation: one test per documented rule, each
citing its page. No workspace and no CLI are needed; docs/databricks.md says what
`databricks bundle validate` adds.
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import EntryPoint
from typing import Any

import pytest

from outbox_relay.config.load import load_config
from tests.bundle import DEPLOY_VARS, JOBS, PROFILE, REPO, TARGETS, load_bundle, variable_values

BUNDLE = load_bundle()
CONTINUOUS = [k for k, j in BUNDLE.jobs.items() if "continuous" in j]
TIMED = [k for k, j in BUNDLE.jobs.items() if j.get("timeout_seconds")]
RETRY_POLICY = ("max_retries", "min_retry_interval_millis", "retry_on_timeout")
TOP_LEVEL_LEVELS = {"CAN_VIEW", "CAN_MANAGE", "CAN_RUN"}


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _entry_points() -> dict[str, EntryPoint]:
    """Every entry point of the wheel, by name, whatever its group (as the launcher looks
    them up: metadata.distribution(package).entry_points)."""
    project = _pyproject()["project"]
    groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
    found = [EntryPoint(name, value, group) for group, table in groups.items()
             for name, value in table.items()]
    names = [ep.name for ep in found]
    assert len(names) == len(set(names)), f"an entry point name used twice: {names}"
    return {ep.name: ep for ep in found}


@pytest.mark.parametrize("job_key", CONTINUOUS)
def test_a_continuous_job_has_no_task_dependencies(job_key: str) -> None:
    """"You cannot use task dependencies with a continuous job."
    https://docs.databricks.com/aws/en/jobs/continuous"""
    for task in BUNDLE.jobs[job_key]["tasks"]:
        assert not task.get("depends_on"), f"{job_key}.{task['task_key']}: {task['depends_on']}"


@pytest.mark.parametrize("job_key", CONTINUOUS)
def test_a_continuous_job_takes_no_retry_policy(job_key: str) -> None:
    """"You cannot use retry policies in a continuous job. Instead, continuous jobs
    automatically retry the entire job on failure using an exponential backoff
    algorithm": a failed run is followed by a new run, later and later while failures
    go on, with no limit on their number.
    https://docs.databricks.com/aws/en/jobs/continuous"""
    for task in BUNDLE.jobs[job_key]["tasks"]:
        assert not set(RETRY_POLICY) & set(task), f"{job_key}.{task['task_key']}"


@pytest.mark.parametrize("job_key", CONTINUOUS)
def test_a_one_task_continuous_job_asks_for_no_task_retries(job_key: str) -> None:
    """task_retry_mode ON_FAILURE: "Retry a failed task if at least one other task in the
    job is still running its first attempt. When this condition is no longer met ... the
    job run is cancelled and a new run is started" (databricks-bundles,
    jobs/_models/task_retry_mode.py, from the Jobs API). With one task no other task is
    ever running: ON_FAILURE would promise a retry that never happens. The API's default
    is NEVER.
    https://docs.databricks.com/api/workspace/jobs/create"""
    job = BUNDLE.jobs[job_key]
    if len(job["tasks"]) == 1:
        assert job["continuous"].get("task_retry_mode", "NEVER") == "NEVER", job["continuous"]


def test_the_runtime_key_names_the_runtime_as_spark_versions_lists_it() -> None:
    """A cluster's spark_version is a key from `GET /api/2.1/clusters/spark-versions`
    ("2.1.x-scala2.11" is a "wildcard" version). Databricks Runtime 19 has unified release
    notes, one page for the whole major version (GA since July 23, 2026), so its key
    names the major only: 19.x-scala2.13.
    https://docs.databricks.com/api/workspace/clusters/sparkversions
    https://docs.databricks.com/aws/en/release-notes/runtime/19"""
    key = variable_values(overrides=DEPLOY_VARS)["spark_version"]
    assert re.fullmatch(r"19\.x-scala2\.13", key), key
    for job in BUNDLE.jobs.values():
        for cluster in job["job_clusters"]:
            assert cluster["new_cluster"]["spark_version"] == key


def test_a_development_deploy_leaves_every_trigger_paused() -> None:
    """Development mode "pauses all schedules and triggers ... Unpause schedules and
    triggers for an individual job by setting schedule.pause_status to UNPAUSED": a
    trigger set UNPAUSED, as a variable's default can set it, runs as soon as deployed.
    https://docs.databricks.com/aws/en/dev-tools/bundles/deployment-modes"""
    for target in TARGETS:
        bundle = load_bundle(target=target)
        if bundle.settings.get("mode") != "development":
            continue
        for job_key in bundle.jobs:
            assert bundle.trigger_pause_status(job_key) != "UNPAUSED", (target, job_key)


def test_each_target_keeps_its_own_checkpoint_and_ledger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`${bundle.target}` is the target's name where it is substituted, so each target's
    cluster points the relay at paths of its own (RELAY_CHECKPOINT_PATH and
    RELAY_LEDGER_PATH override the profile's).
    https://docs.databricks.com/aws/en/dev-tools/bundles/variables"""
    seen: dict[tuple[str, str], str] = {}
    for target in TARGETS:
        for job_key, job in load_bundle(target=target).jobs.items():
            (cluster,) = [c["new_cluster"] for c in job["job_clusters"]]
            # A secret reference stands for a value only a workspace resolves; the
            # profile's env:NAME options read the process environment.
            env = {k: "placeholder" if v.startswith("{{secrets/") else v
                   for k, v in cluster["spark_env_vars"].items()}
            for name, value in env.items():
                monkeypatch.setenv(name, value)
            config = load_config(str(PROFILE), env=env)
            paths = (config.relay.checkpoint_path, config.ledger.path)
            assert all(f"/{target}/" in p for p in paths), (target, job_key, paths)
            assert seen.setdefault(paths, target) == target, f"{paths} shared by targets"


@pytest.mark.parametrize("job_key", TIMED)
def test_every_attempt_and_retry_wait_fits_in_the_job_timeout(job_key: str) -> None:
    """A task's timeout_seconds is "applied to each run of this job task", a retry starts
    min_retry_interval_millis after "the start of the failed run" at the earliest, and
    the job's timeout_seconds is "applied to each run of this job": the tasks of one
    path, each with every attempt timing out, end inside the job's timeout.
    https://docs.databricks.com/api/workspace/jobs/create"""
    job = BUNDLE.jobs[job_key]
    worst: dict[str, str] = {}
    total = 0.0
    for task in job["tasks"]:
        attempts = 1 + task.get("max_retries", 0)
        # No timeout ("0 means no timeout") bounds an attempt by nothing but the job's.
        timeout = task.get("timeout_seconds") or float("inf")
        waits = (attempts - 1) * task.get("min_retry_interval_millis", 0) / 1000
        total += attempts * timeout + waits
        worst[task["task_key"]] = f"{attempts} x {timeout} s + {waits:.0f} s"
    assert total <= job["timeout_seconds"], f"{worst} > {job['timeout_seconds']} s"


@pytest.mark.parametrize("job_key", JOBS)
def test_every_task_runs_an_entry_point_of_the_wheel_the_job_installs(job_key: str) -> None:
    """A Python wheel task names the wheel's package and "the function that runs the
    logic in the wheel. This function must be defined as a key in the entry_points", and
    the code that runs is the installed wheel's, not files synced beside it.
    https://docs.databricks.com/aws/en/jobs/python-wheel"""
    name = _pyproject()["project"]["name"]
    entry_points = _entry_points()
    for task in BUNDLE.jobs[job_key]["tasks"]:
        wheel_task = task.get("python_wheel_task")
        assert wheel_task, f"{job_key}.{task['task_key']} is no python_wheel_task"
        assert re.sub(r"[-_.]+", "-", wheel_task["package_name"]) == name
        assert wheel_task["entry_point"] in entry_points, wheel_task["entry_point"]
        assert any(lib.get("whl") for lib in task["libraries"]), "the wheel is not installed"


def test_the_tasks_entry_point_fails_the_task_on_a_non_zero_exit_code() -> None:
    """Databricks' wheel launcher, as the CLI's python_wheel_wrapper reproduces it, calls
    `entry[0].load()()` and drops what it returns: a relay exit code returned would never
    fail the task, so the entry point raises it.
    https://github.com/databricks/cli/blob/main/bundle/trampoline/python_wheel.go"""
    from outbox_relay.databricks_task import TaskFailed

    (entry,) = {t["python_wheel_task"]["entry_point"] for j in BUNDLE.jobs.values()
                for t in j["tasks"]}
    function = _entry_points()[entry].load()
    assert function(["packages"]) is None
    with pytest.raises(TaskFailed, match=r"exited with 2 \(USAGE"):
        function(["--config", str(REPO / "no-such-profile.toml"), "migrate"])


@pytest.mark.parametrize("job_key", JOBS)
def test_a_failed_run_notifies(job_key: str) -> None:
    """email_notifications.on_failure: "A list of email addresses to be notified when a
    run unsuccessfully completes" (FAILED, TIMED_OUT, INTERNAL_ERROR); without it "the
    list is empty, and notifications are not sent".
    https://docs.databricks.com/api/workspace/jobs/create
    https://docs.databricks.com/aws/en/jobs/notifications"""
    notify = BUNDLE.jobs[job_key].get("email_notifications", {})
    assert notify.get("on_failure"), job_key


@pytest.mark.parametrize("job_key", TIMED)
def test_a_run_longer_than_expected_warns_before_it_times_out(job_key: str) -> None:
    """on_duration_warning_threshold_exceeded is sent "when the duration of a run exceeds
    the threshold specified for the RUN_DURATION_SECONDS metric in the health field. If
    no rule for the RUN_DURATION_SECONDS metric is specified ... notifications are not
    sent." The warning is worth something only before the job's own timeout.
    https://docs.databricks.com/api/workspace/jobs/create"""
    job = BUNDLE.jobs[job_key]
    rules = [r for r in job.get("health", {}).get("rules", [])
             if r["metric"] == "RUN_DURATION_SECONDS"]
    assert len(rules) == 1 and rules[0]["op"] == "GREATER_THAN", job_key
    assert 0 < int(rules[0]["value"]) < job["timeout_seconds"]
    assert job["email_notifications"].get("on_duration_warning_threshold_exceeded")


@pytest.mark.parametrize("target", TARGETS)
def test_permissions_let_operators_run_the_jobs(target: str) -> None:
    """The top-level permissions mapping applies to every resource of the bundle;
    "Allowed top-level permission levels are CAN_VIEW, CAN_MANAGE, and CAN_RUN", each for
    one user_name, group_name or service_principal_name.
    https://docs.databricks.com/aws/en/dev-tools/bundles/permissions"""
    permissions = load_bundle(target=target).permissions
    assert {p["level"] for p in permissions} <= TOP_LEVEL_LEVELS, permissions
    principals = ("user_name", "group_name", "service_principal_name")
    assert all(sum(k in p for k in principals) == 1 for p in permissions), permissions
    assert any(p["level"] in {"CAN_RUN", "CAN_MANAGE"} and "group_name" in p
               for p in permissions), "no group may run the jobs"

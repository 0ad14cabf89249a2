"""The Databricks bundle, validated offline (no workspace, no CLI): the project's own rules.

"Valid" means: every job of every target passes the `databricks-bundles` package's own
model after the bundle's variables are resolved, and the project's rules hold. The rules
Databricks documents are tests/unit/test_databricks_rules.py.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from databricks.bundles.jobs import Job

from outbox_relay.cli import build_parser
from outbox_relay.config.load import PASSWORD_ENV, load_config
from outbox_relay.launch.packages import SPARK_PACKAGES
from outbox_relay.launch.spark import REDACTION_REGEX
from tests.bundle import (
    JOBS,
    PROFILE,
    REPO,
    TARGETS,
    WORKSPACE_FILES,
    load_bundle,
    maven_coordinates,
    task_parameters,
)

SECRET_REF = re.compile(r"^\{\{secrets/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+\}\}$")
ENV_REF = "env:"

BUNDLE = load_bundle()
# The jobs that migrate, and those that run the relay.
MIGRATING = [k for k in JOBS if any(t["python_wheel_task"]["parameters"][-1] == "migrate"
                                    for t in BUNDLE.tasks(k).values())]
RELAYING = ["outbox_relay_drain", "outbox_relay_continuous"]


def _cluster_env(job_key: str, secret_env: dict[str, str]) -> dict[str, str]:
    """What the job cluster puts in the environment, secrets as their placeholders."""
    (cluster,) = [c["new_cluster"] for c in BUNDLE.jobs[job_key]["job_clusters"]]
    env = {k: v for k, v in cluster["spark_env_vars"].items() if not SECRET_REF.match(v)}
    return {**secret_env, **env}


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


def test_the_bundle_defines_every_job() -> None:
    assert sorted(BUNDLE.jobs) == sorted(JOBS)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("job_key", JOBS)
def test_every_job_passes_the_bundle_model(job_key: str, target: str) -> None:
    job = load_bundle(target=target).jobs[job_key]
    assert Job.from_dict(job).as_dict() == job, "the model dropped or changed a field"


@pytest.mark.parametrize("job_key", JOBS)
def test_at_most_one_trigger_and_one_run_at_a_time(job_key: str) -> None:
    job = BUNDLE.jobs[job_key]
    assert not ("continuous" in job and "schedule" in job)
    assert job["max_concurrent_runs"] == 1


def test_in_prod_the_drain_runs_on_its_schedule_and_the_continuous_job_waits() -> None:
    prod = load_bundle(target="prod")
    status = {k: prod.trigger_pause_status(k) for k in prod.jobs}
    assert status == {"outbox_relay_migrate": None, "outbox_relay_drain": "UNPAUSED",
                      "outbox_relay_continuous": "PAUSED"}


def test_airflow_pauses_the_drains_own_schedule_with_one_variable() -> None:
    prod = load_bundle({"drain_pause_status": "PAUSED"}, target="prod")
    status = {k: prod.trigger_pause_status(k) for k in prod.jobs}
    assert set(status.values()) == {"PAUSED", None}, status
    Job.from_dict(prod.jobs["outbox_relay_drain"])


def test_switching_to_the_continuous_job_is_two_variables() -> None:
    """A pause status written in the bundle is set again at every deploy, undoing an
    operator's switch in the UI: each trigger's status is a variable, so the switch is
    made where a deploy keeps it (--var, BUNDLE_VAR_*, variable-overrides.json)."""
    raw = yaml.safe_load((REPO / "resources" / "outbox_relay.job.yml").read_text("utf-8"))
    declared = yaml.safe_load((REPO / "databricks.yml").read_text("utf-8"))["variables"]
    for job_key, job in raw["resources"]["jobs"].items():
        for trigger in ("schedule", "continuous", "trigger"):
            if trigger in job:
                status = re.fullmatch(r"\$\{var\.(\w+)\}", job[trigger]["pause_status"])
                assert status and status[1] in declared, (job_key, job[trigger])
    prod = load_bundle({"drain_pause_status": "PAUSED", "continuous_pause_status": "UNPAUSED"},
                       target="prod")
    status = {k: prod.trigger_pause_status(k) for k in prod.jobs}
    assert status == {"outbox_relay_migrate": None, "outbox_relay_drain": "PAUSED",
                      "outbox_relay_continuous": "UNPAUSED"}
    for target in TARGETS:  # the alternatives: never both running by default
        bundle = load_bundle(target=target)
        assert "PAUSED" in {bundle.trigger_pause_status(k) for k in RELAYING}, target


NUMBERS = {"an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
COUNTED = re.compile(r"\b(one|two|three|four|five|\d+) (?:relay )?jobs\b"
                     r"(?: and (an|one|two|three|\d+) (?:metrics )?apps?\b)?", re.IGNORECASE)


def _number(word: str) -> int:
    return NUMBERS.get(word.lower()) or int(word)


@pytest.mark.parametrize("page", ["README.md", "docs/databricks.md", "databricks.yml",
                                  "resources/outbox_relay.job.yml"])
def test_the_pages_count_the_bundles_resources(page: str) -> None:
    """What the bundle makes, as the pages count it: every "N jobs" is the number of its
    jobs and is followed by the number of its apps, which a reader would otherwise miss."""
    text = " ".join((REPO / page).read_text(encoding="utf-8").split())
    counts = [(m[0], m[1], m[2]) for m in COUNTED.finditer(text)]
    assert counts, f"{page} never counts what the bundle makes"
    for phrase, jobs, apps in counts:
        assert _number(jobs) == len(BUNDLE.jobs), phrase
        assert apps, f"{page}: {phrase!r} leaves out the bundle's {len(BUNDLE.apps)} app"
        assert _number(apps) == len(BUNDLE.apps), phrase


def test_the_drain_is_scheduled_with_retries_and_a_timeout() -> None:
    job = BUNDLE.jobs["outbox_relay_drain"]
    relay_task = BUNDLE.command_task("outbox_relay_drain", "run")
    assert job["schedule"]["quartz_cron_expression"]
    assert "--available-now" in task_parameters(relay_task)
    assert relay_task["max_retries"] >= 1
    assert 0 < relay_task["timeout_seconds"] <= job["timeout_seconds"]
    continuous = BUNDLE.command_task("outbox_relay_continuous", "run")
    assert "--available-now" not in task_parameters(continuous)


@pytest.mark.parametrize("job_key", JOBS)
def test_every_secret_the_profile_reads_comes_from_a_databricks_secret(job_key: str) -> None:
    clusters = [c["new_cluster"] for c in BUNDLE.jobs[job_key]["job_clusters"]]
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
    leaves = _string_leaves(BUNDLE.jobs) + _string_leaves(profile)
    named = [(k, v) for k, v in leaves if secret_key.search(k)]
    assert named, "the check found no secret-looking key at all"
    for key, value in named:
        assert SECRET_REF.match(value) or value.startswith(ENV_REF), f"{key} = {value!r}"
    for key, value in leaves:
        assert not re.search(r"(?i)password\s*=|:[^/@\s]+@", value), f"{key} = {value!r}"


@pytest.mark.parametrize("job_key", RELAYING)
def test_relay_parameters_parse_and_name_a_profile_that_loads(
    job_key: str, secret_env: dict[str, str]
) -> None:
    args = build_parser().parse_args(task_parameters(BUNDLE.command_task(job_key, "run")))
    assert Path(args.config).resolve() == PROFILE
    config = load_config(args.config, env=_cluster_env(job_key, secret_env))
    assert config.spark.master is None
    assert config.spark.resolve_packages is False
    assert config.ledger.path.startswith("/Volumes/")
    assert config.relay.checkpoint_path.startswith("/Volumes/")
    # A Volume is a FUSE mount on the driver, where delta-rs's commits fail (delta-rs
    # issue 2540): the profile says so instead of relying on `auto` to know the path.
    assert config.ledger.writer == "spark"


@pytest.mark.parametrize("job_key", MIGRATING)
def test_migrate_runs_the_cli_migrate_on_the_same_profile(
    job_key: str, secret_env: dict[str, str]
) -> None:
    args = build_parser().parse_args(task_parameters(BUNDLE.command_task(job_key, "migrate")))
    assert Path(args.config).resolve() == PROFILE
    load_config(args.config, env=_cluster_env(job_key, secret_env))


def test_the_drain_migrates_before_it_drains() -> None:
    migrate = BUNDLE.command_task("outbox_relay_drain", "migrate")
    relay_task = BUNDLE.command_task("outbox_relay_drain", "run")
    assert not migrate.get("depends_on")
    assert relay_task["depends_on"] == [{"task_key": migrate["task_key"]}]


def test_a_migrate_job_of_its_own_serves_the_continuous_job() -> None:
    assert set(MIGRATING) == {"outbox_relay_migrate", "outbox_relay_drain"}
    job = BUNDLE.jobs["outbox_relay_migrate"]
    assert not {"schedule", "continuous", "trigger"} & set(job), "run it after a deploy"


@pytest.mark.parametrize("job_key", JOBS)
def test_libraries_are_the_wheel_and_only_packages_the_runtime_lacks(job_key: str) -> None:
    for task in BUNDLE.tasks(job_key).values():
        libraries = task["libraries"]
        wheels = [lib["whl"] for lib in libraries if "whl" in lib]
        maven = maven_coordinates(task)
        assert len(wheels) == 1 and wheels[0].endswith(".whl")
        assert maven <= set(SPARK_PACKAGES), maven - set(SPARK_PACKAGES)
        # The wheel's [relay] extra, which a `whl` library does not install
        # (tests/unit/test_packaging.py checks the file).
        requirements = [lib["requirements"] for lib in libraries if "requirements" in lib]
        assert requirements == ["${workspace.file_path}/requirements/relay.txt"]
        assert len(libraries) == len(wheels) + len(maven) + len(requirements)


@pytest.mark.parametrize("job_key", JOBS)
def test_every_task_of_a_job_installs_the_same_libraries(job_key: str) -> None:
    # The migrate task needs the wheel's [relay] extra too: psycopg2, which DBR 19 dropped.
    libraries = [t["libraries"] for t in BUNDLE.tasks(job_key).values()]
    assert all(lib == libraries[0] for lib in libraries), libraries


@pytest.mark.parametrize("job_key", JOBS)
def test_every_task_reads_the_profile_from_the_synced_files(job_key: str) -> None:
    for task in BUNDLE.tasks(job_key).values():
        params = task["python_wheel_task"]["parameters"]
        assert params[:2] == ["--config", f"{WORKSPACE_FILES}/conf/{PROFILE.name}"], params


def test_the_drain_gives_up_before_its_task_times_out(secret_env: dict[str, str]) -> None:
    """An available-now drain that cannot finish reports its left-over topics (exit 1)
    within the task's timeout, instead of being cut off by Databricks."""
    task = BUNDLE.command_task("outbox_relay_drain", "run")
    config = load_config(str(PROFILE), env=secret_env)
    assert config.relay.available_now_deadline_s < task["timeout_seconds"]


def test_the_drain_stops_by_its_time_budget_before_its_task_times_out() -> None:
    """The margin docs/operating.md gives above a drain's budget: the writes in flight
    (kafka.delivery_timeout_ms, 120 s by default) and 60 s for the rest. Without a budget
    a large backlog's drain ran until Databricks cut it off mid-write at the timeout."""
    task = BUNDLE.command_task("outbox_relay_drain", "run")
    args = build_parser().parse_args(task_parameters(task))

    assert 0 < args.time_budget_s <= task["timeout_seconds"] - 180


@pytest.mark.parametrize("job_key", JOBS)
def test_the_cluster_maps_the_addresses_the_profile_leaves_as_examples(job_key: str) -> None:
    for cluster in (c["new_cluster"] for c in BUNDLE.jobs[job_key]["job_clusters"]):
        env = cluster["spark_env_vars"]
        assert env["RELAY_POSTGRES_URL"].startswith("postgresql://")
        assert env["RELAY_KAFKA_BOOTSTRAP_SERVERS"]


# Of outbox_relay/launch/packages.py, what a Databricks Runtime ships itself: its Kafka connector
# and Delta Lake (databricks.yml cites where that is documented).
SHIPPED_BY_THE_RUNTIME = {"spark-sql-kafka-0-10", "delta-spark"}


@pytest.mark.parametrize("job_key", JOBS)
def test_the_maven_libraries_are_exactly_what_the_runtime_lacks(job_key: str) -> None:
    lacking = {c for c in SPARK_PACKAGES
               if not any(c.split(":")[1].startswith(s) for s in SHIPPED_BY_THE_RUNTIME)}
    assert lacking == {c for c in SPARK_PACKAGES if c.startswith("org.postgresql:")}
    for task in BUNDLE.tasks(job_key).values():
        assert maven_coordinates(task) == lacking


def test_the_shaded_jaas_login_module_is_shown_in_the_profile_and_the_docs() -> None:
    shaded = "kafkashaded.org.apache.kafka.common.security.plain.PlainLoginModule"
    for path in (PROFILE, REPO / "docs" / "databricks.md"):
        assert shaded in path.read_text(encoding="utf-8"), path

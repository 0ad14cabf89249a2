"""The ways to run the standing exporter (`outbox-relay metrics serve`) that deploy/ and
the bundle ship, checked against the CLI's own parser and the config loader: a unit
that runs a command the CLI refuses, or a port nothing listens on, fails here."""

from __future__ import annotations

import argparse
import configparser
import fnmatch
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from databricks.bundles.apps import App
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from outbox_relay.cli import build_parser
from outbox_relay.cli.observe import DEFAULT_METRICS_PORT
from outbox_relay.config.env import PASSWORD_ENV, reads_variable
from outbox_relay.config.load import build_config, load_config

REPO = Path(__file__).resolve().parents[2]
SYSTEMD = REPO / "deploy" / "systemd" / "outbox-relay-metrics.service"
KUBERNETES = REPO / "deploy" / "kubernetes" / "outbox-relay-metrics.yaml"
BUNDLE_APP = REPO / "resources" / "outbox_relay_metrics.yml"
# What the exporter needs from its environment: where the outbox is, and its password.
DATABASE_ENV = {"RELAY_POSTGRES_URL", PASSWORD_ENV}
# Databricks substitutes it in an app's command ("the one exception" to no shell):
# https://learn.microsoft.com/azure/databricks/dev-tools/databricks-apps/app-runtime
APP_PORT_ENV = "$DATABRICKS_APP_PORT"


def _serve(argv: list[str]) -> argparse.Namespace:
    """`argv` (after the program) parsed by the real CLI, which must read it as `metrics
    serve` and keep serving (no --once)."""
    args = build_parser().parse_args(argv)
    assert (args.command, args.metrics_cmd) == ("metrics", "serve"), argv
    assert not args.once, "--once prints one scrape and exits: not a standing exporter"
    return args


def _env_the_loader_reads(names: set[str]) -> None:
    assert names >= DATABASE_ENV, f"missing {DATABASE_ENV - names}"
    unread = {name for name in names if not reads_variable(name)}
    assert not unread, f"not read: {unread}"


def test_the_systemd_unit_runs_the_exporter_and_restarts_it() -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    unit.read_string(SYSTEMD.read_text(encoding="utf-8"))
    service = unit["Service"]
    argv = shlex.split(service["ExecStart"])
    assert Path(argv[0]).name == "outbox-relay" and Path(argv[0]).is_absolute()
    args = _serve(argv[1:])
    assert (args.host, args.port) == ("0.0.0.0", DEFAULT_METRICS_PORT)
    assert service["Restart"] == "on-failure" and int(service["RestartSec"]) > 0
    assert unit["Unit"]["StartLimitIntervalSec"] == "0"  # retried for ever
    assert service["EnvironmentFile"].startswith("/")
    # The environment file is the operator's: its header names what goes in it.
    header = SYSTEMD.read_text(encoding="utf-8").split("[Unit]")[0]
    _env_the_loader_reads(set(re.findall(r"\b(RELAY_[A-Z_]+)=", header)))
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    """systemd's own check (unknown keys, wrong sections, a missing binary), on a copy
    whose ExecStart names this venv's outbox-relay."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here (systemd's own tool)")
    binary = Path(sys.executable).with_name("outbox-relay")
    unit = tmp_path / SYSTEMD.name
    unit.write_text(re.sub(r"(?m)^(ExecStart=)\S+", rf"\g<1>{binary}",
                           SYSTEMD.read_text(encoding="utf-8")), encoding="utf-8")
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), \
        result.stdout + result.stderr


def _kubernetes() -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(KUBERNETES.read_text(encoding="utf-8")) if d]
    return {d["kind"]: d for d in docs}


def test_the_kubernetes_deployment_runs_the_exporter_on_the_port_it_probes() -> None:
    objects = _kubernetes()
    assert set(objects) == {"Deployment", "Service"}
    deployment = objects["Deployment"]
    assert deployment["apiVersion"] == "apps/v1"
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    pod = spec["template"]
    assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["restartPolicy"] == "Always"
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["outbox-relay"]
    args = _serve(container["args"])
    assert args.host == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": args.port}
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(args.port)
    for probe in ("livenessProbe", "readinessProbe"):
        action = container[probe].get("httpGet") or container[probe]["tcpSocket"]
        assert action["port"] in ("metrics", args.port), (probe, action)
    assert container["readinessProbe"]["httpGet"]["path"] == "/metrics"
    env = {e["name"]: e for e in container["env"]}
    _env_the_loader_reads(set(env))
    for name in DATABASE_ENV:  # from a Secret, never written in the manifest
        assert "value" not in env[name] and env[name]["valueFrom"]["secretKeyRef"]["key"]


def test_the_kubernetes_service_reaches_the_pods_metrics_port() -> None:
    objects = _kubernetes()
    pod = objects["Deployment"]["spec"]["template"]
    service = objects["Service"]["spec"]
    assert service["selector"].items() <= pod["metadata"]["labels"].items()
    (port,) = service["ports"]
    assert port["targetPort"] == "metrics" and port["port"] == DEFAULT_METRICS_PORT


def _bundle_app() -> dict[str, Any]:
    (app,) = yaml.safe_load(BUNDLE_APP.read_text(encoding="utf-8"))["resources"]["apps"].values()
    return dict(app)


def test_the_bundle_app_passes_the_bundle_model_and_uses_a_declared_variable() -> None:
    app = _bundle_app()
    assert App.from_dict(app).as_dict() == app, "the model dropped or changed a field"
    variables = yaml.safe_load((REPO / "databricks.yml").read_text(encoding="utf-8"))["variables"]
    used = set(re.findall(r"\$\{var\.([a-z_]+)\}", BUNDLE_APP.read_text(encoding="utf-8")))
    assert used and used <= set(variables), used - set(variables)


def test_the_bundle_app_runs_the_exporter_with_its_secrets_and_profile() -> None:
    app = _bundle_app()
    source = (BUNDLE_APP.parent / app["source_code_path"]).resolve()
    manifest = yaml.safe_load((source / "app.yaml").read_text(encoding="utf-8"))
    command = [w.replace(APP_PORT_ENV, "8000") for w in manifest["command"]]
    assert command[0] == "outbox-relay" and APP_PORT_ENV in manifest["command"]
    args = _serve(command[1:])
    assert (args.host, args.port) == ("0.0.0.0", 8000)  # Databricks Apps listen on 0.0.0.0
    env = {e["name"]: e for e in manifest["env"]}
    _env_the_loader_reads(set(env))
    secrets = {r["name"]: r["secret"] for r in app["resources"]}
    for name in DATABASE_ENV:
        assert env[name]["valueFrom"] in secrets and "value" not in env[name]
    assert {s["permission"] for s in secrets.values()} == {"READ"}
    config = load_config(source / args.config, env={
        "RELAY_POSTGRES_URL": "postgresql://u@db.internal:5432/app", PASSWORD_ENV: "x"})
    shipped = tomllib.loads((REPO / "conf" / "databricks.toml").read_text(encoding="utf-8"))
    assert config.postgres.sslmode == shipped["postgres"]["sslmode"]
    assert config.relay.lock_timeout_s == shipped["relay"]["lock_timeout_s"]
    assert config.metrics.max_label_topics == shipped["metrics"]["max_label_topics"]


def test_the_databricks_profile_exports_the_drains_counters() -> None:
    """Metrics were off in the Databricks profile: its drains pushed nothing."""
    shipped = tomllib.loads((REPO / "conf" / "databricks.toml").read_text(encoding="utf-8"))
    assert shipped["metrics"]["enabled"] is True
    url = "https://pushgateway.internal:9091"
    metrics = build_config({"metrics": shipped["metrics"]},
                           env={"RELAY_PUSHGATEWAY_URL": url}).metrics
    assert metrics.enabled and metrics.pushgateway_url == url


def test_the_drain_cluster_gives_the_profile_its_pushgateway() -> None:
    """conf/databricks.toml reads the Pushgateway from RELAY_PUSHGATEWAY_URL: the drain's
    cluster must set it, from a variable the bundle declares, or no drain pushes."""
    jobs = yaml.safe_load((REPO / "resources" / "outbox_relay.job.yml").read_text("utf-8"))
    variables = yaml.safe_load((REPO / "databricks.yml").read_text("utf-8"))["variables"]
    drain = jobs["resources"]["jobs"]["outbox_relay_drain"]
    for cluster in drain["job_clusters"]:
        value = cluster["new_cluster"]["spark_env_vars"]["RELAY_PUSHGATEWAY_URL"]
        match = re.fullmatch(r"\$\{var\.(\w+)\}", value)
        assert match and match.group(1) in variables, value


def _app_requirements() -> list[str]:
    app = _bundle_app()
    source = (BUNDLE_APP.parent / app["source_code_path"]).resolve()
    lines = (source / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_app_installs_the_wheel_it_ships_and_nothing_of_ours_from_an_index() -> None:
    """The app asked the package index for outbox-relay==0.1.0, which is not published
    there: whoever published that name would run code beside the database password. It
    installs the wheel the bundle's build puts in its source folder (pip reads a path
    in requirements.txt as a local file), at the version pyproject.toml builds."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    ours = canonicalize_name(project["name"])
    wheels = []
    for line in _app_requirements():
        path = line.split("[")[0]
        if path.endswith(".whl"):
            wheels.append(path)
            continue
        assert canonicalize_name(Requirement(line).name) != ours, f"{line!r} is from an index"
    (wheel,) = wheels
    assert wheel.startswith("./") and "/" not in wheel[2:], f"{wheel} is not in the app folder"
    name, version, _, _ = parse_wheel_filename(wheel[2:])
    assert (name, str(version)) == (ours, project["version"]), wheel


def test_the_bundle_syncs_the_apps_wheel_that_git_ignores() -> None:
    """The bundle syncs what git does not ignore, and `sync.include` globs "explicitly
    include files that were excluded by the user's gitignore"; the built wheel is
    ignored (it is no source), so the include is what puts it in the app's folder.
    https://github.com/databricks/cli/blob/main/bundle/config/sync.go"""
    (wheel,) = [line for line in _app_requirements() if line.split("[")[0].endswith(".whl")]
    app = _bundle_app()
    source = (BUNDLE_APP.parent / app["source_code_path"]).resolve()
    synced = (source / wheel.split("[")[0]).relative_to(REPO).as_posix()
    include = yaml.safe_load((REPO / "databricks.yml").read_text("utf-8"))["sync"]["include"]
    assert any(fnmatch.fnmatch(synced, glob) for glob in include), (synced, include)
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "-q", synced], cwd=REPO,
                             check=False)
    assert ignored.returncode == 0, f"{synced} is not git-ignored: a build would dirty the tree"


MIGRATES = re.compile(r"(?i)(?<![-\w])relay\b[^.;]{0,60}\bmigrat(?:es|ed)\b")


def test_no_page_says_the_relay_migrates_the_schema_at_its_start() -> None:
    """A relay never migrates: on a schema behind its own it stops with exit 2
    (outbox_relay/control/migrate.py, require_current), and `outbox-relay migrate` (the
    bundle's migrate job, the drain job's first task) is what moves it on. The exporter's
    units wait for that, not for a relay's start."""
    pages = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "deploy").rglob("*"),
             *(REPO / "conf").glob("*.toml"), REPO / "databricks.yml",
             *(REPO / "resources").glob("*.yml")]
    said = [f"{p.relative_to(REPO)}: {m[0]}" for p in pages
            if p.is_file() and p.suffix not in {".whl", ".pyc"}
            for m in MIGRATES.finditer(" ".join(p.read_text(encoding="utf-8").split()))]
    assert not said, said

"""The bundle's metrics app as a deploy makes it and Databricks runs it.

The bundle's build runs as the CLI runs an artifact's `build`: through the shell
(`bash -ec`), in the artifact's `path`, in a copy of the checkout (with a wheel of an
older version left in both output folders, as a previous deploy leaves one). Then the
app's source folder alone, which is what an app deployment holds, is installed into an
empty venv from its requirements.txt, and its command (app.yaml) runs with
DATABRICKS_APP_PORT set and the environment its resources' secrets give, against the
local stack's database. Prometheus's path for an app, /api/metrics, is scraped.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.bundle import REPO, load_bundle, root_config
from tests.integration.helpers import wait_for
from tests.integration.prometheus import answers, free_port, get, parse, value
from tests.integration.wheel import installed, new_venv, pip_install, run_ok

pytestmark = pytest.mark.integration

APP = "outbox_relay_metrics"
STALE = "outbox_relay-0.0.1-py3-none-any.whl"


def _checkout_copy(dest: Path) -> Path:
    """The files a deploy sees: those git tracks or would track, as they are now."""
    listed = run_ok("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                    cwd=REPO)
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


def _build_as_the_cli_does(checkout: Path, python_bin: Path) -> None:
    (artifact,) = root_config()["artifacts"].values()
    # The deployer's environment, with the Python that has `build` first on the PATH.
    env = {**os.environ, "PATH": f"{python_bin}{os.pathsep}{os.environ['PATH']}"}
    run_ok("bash", "-ec", artifact["build"], cwd=checkout / artifact["path"], env=env)


def _app_env(app: dict[str, Any], manifest: dict[str, Any], url: str) -> dict[str, str]:
    """What the app's resources put in its environment: here the stack's database."""
    secrets = {r["name"]: r["secret"]["key"] for r in app["resources"]}
    values = {"postgres-url": url, "postgres-password": "unused-by-the-local-stack"}
    return {e["name"]: values[secrets[e["valueFrom"]]] for e in manifest["env"]}


def test_the_app_installs_the_wheel_the_build_ships_and_serves_the_outbox(
    migrated_url: str, tmp_path: Path,
) -> None:
    checkout = _checkout_copy(tmp_path / "checkout")
    bundle = load_bundle()
    app = bundle.apps[APP]
    app_dir = (bundle.defined_in[APP] / app["source_code_path"]).resolve()
    app_dir = checkout / app_dir.relative_to(REPO)
    for folder in (checkout / "dist", app_dir):
        folder.mkdir(exist_ok=True)
        (folder / STALE).write_bytes(b"an older build")

    _build_as_the_cli_does(checkout, Path(sys.executable).parent)

    (wheel,) = (checkout / "dist").glob("*.whl")
    libraries = {lib["whl"] for job in bundle.jobs.values() for task in job["tasks"]
                 for lib in task["libraries"] if "whl" in lib}
    (glob,) = libraries  # relative to the file that defines the jobs
    jobs_dir = checkout / bundle.defined_in["outbox_relay_drain"].relative_to(REPO)
    matched = [p.resolve() for p in jobs_dir.glob(glob)]
    assert matched == [wheel.resolve()], "the jobs would install another wheel, or two"
    assert [p.name for p in app_dir.glob("*.whl")] == [wheel.name]
    assert filecmp.cmp(wheel, app_dir / wheel.name, shallow=False)

    # The app's folder alone, as an app deployment copies it; its profile's sslmode
    # fitted to the local stack, which speaks no TLS.
    deployed = shutil.copytree(app_dir, tmp_path / "app")
    profile = deployed / "profile.toml"
    profile.write_text(profile.read_text(encoding="utf-8").replace(
        'sslmode = "require"', 'sslmode = "disable"'), encoding="utf-8")
    python, env = new_venv(tmp_path / "venv", cwd=deployed)
    pip_install(python, "-r", "requirements.txt", cwd=deployed, env=env)
    assert installed(python, deployed, env)["outbox-relay"] == wheel.name.split("-")[1]

    manifest = yaml.safe_load((deployed / "app.yaml").read_text(encoding="utf-8"))
    port = free_port()
    command = [w.replace("$DATABRICKS_APP_PORT", str(port)) for w in manifest["command"]]
    log = tmp_path / "app.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=deployed, stdout=out, stderr=subprocess.STDOUT,
                                env={**env, **_app_env(app, manifest, migrated_url)})
    metrics = f"http://127.0.0.1:{port}/api/metrics"
    try:
        assert wait_for(lambda: answers(metrics), 60, 0.2), log.read_text()
        samples = parse(get(metrics))
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert value(samples, "outbox_relay_database_up") == 1, log.read_text()
    assert code == 0, log.read_text()

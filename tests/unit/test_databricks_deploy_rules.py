"""Who can deploy the bundle, where it lands, and what it needs first, against the
Databricks CLI's own source and Databricks' documentation: one test per rule, each
citing its page. tests/unit/test_databricks_rules.py holds the rules of the jobs
themselves.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from databricks.bundles.apps import App
from databricks.bundles.jobs import JobRunAs

from tests.bundle import (
    DEPLOY_VARS,
    REPO,
    TARGETS,
    Bundle,
    MissingVariable,
    load_bundle,
    root_config,
    variable_values,
)

BUNDLES = {t: load_bundle(target=t) for t in TARGETS}
PRODUCTION = [t for t, b in BUNDLES.items() if b.settings.get("mode") == "production"]
# The variables without which no deploy may go on: the relay's two addresses, who is
# told of a failure, and (production) whom the jobs run as.
REQUIRED = ("postgres_url", "kafka_bootstrap_servers", "alert_email",
            "run_as_service_principal")
# An app's name "must contain only lowercase alphanumeric characters and hyphens. It
# must be unique within the workspace" (databricks-bundles, apps/_models/app.py), and
# is 2 to 30 characters long.
APP_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,28}[a-z0-9]")


def test_there_is_a_production_target() -> None:
    assert PRODUCTION, "no target in production mode: the rules below check nothing"


def _job_run_as(bundle: Bundle, job_key: str) -> dict[str, Any] | None:
    """The identity a job runs as after the CLI's SetRunAs: its own run_as, else the
    bundle-wide one (bundle/config/mutator/resourcemutator/run_as.go, setRunAsForJobs)."""
    own = bundle.jobs[job_key].get("run_as")
    return own if own is not None else bundle.run_as


@pytest.mark.parametrize("target", TARGETS)
def test_no_app_is_deployed_under_a_bundle_wide_run_as(target: str) -> None:
    """"If the identity used to deploy a bundle is different from the identity configured
    in the bundle's run_as setting, only jobs and pipelines are supported"; the CLI
    refuses with "apps do not support a setting a run_as user that is different from
    the owner". A person deploys prod, so prod names its service principal per job.
    https://docs.databricks.com/aws/en/dev-tools/bundles/run-as
    https://github.com/databricks/cli/blob/main/bundle/config/mutator/resourcemutator/run_as.go"""
    bundle = BUNDLES[target]
    if bundle.run_as is not None:
        assert not bundle.apps, f"{target}: run_as {bundle.run_as} with apps {list(bundle.apps)}"


@pytest.mark.parametrize("target", PRODUCTION)
def test_in_production_every_job_runs_as_the_service_principal(target: str) -> None:
    """"Databricks recommends using service principals for production deployments. You
    can enforce this by setting run_as to a service principal." A job's run_as takes "the
    application ID of an active service principal. Setting this field requires the
    `servicePrincipal/user` role" (databricks-bundles, jobs/_models/job_run_as.py). The
    CLI's production check accepts run_as "explicitly set for all resources" in place of
    a top-level one (validate_target_mode.go, isRunAsSet).
    https://docs.databricks.com/aws/en/dev-tools/bundles/deployment-modes
    https://github.com/databricks/cli/blob/main/bundle/config/mutator/resourcemutator/validate_target_mode.go"""
    bundle = BUNDLES[target]
    expected = {"service_principal_name": DEPLOY_VARS["run_as_service_principal"]}
    for job_key in bundle.jobs:
        run_as = _job_run_as(bundle, job_key)
        assert run_as == expected, (job_key, run_as)
        assert JobRunAs.from_dict(run_as).as_dict() == run_as  # type: ignore[arg-type]


@pytest.mark.parametrize("target", PRODUCTION)
def test_the_production_root_path_is_one_for_every_deployer(target: str) -> None:
    """The CLI wants a production target to "set 'workspace.root_path' to make sure only
    one copy is deployed": a path under `${workspace.current_user...}` makes one copy per
    person who deploys, and with it a second drain on the same checkpoint. Nor under
    /Workspace/Shared: "Shared folders are writable by all workspace users", and the
    jobs read their profile from the synced files.
    https://docs.databricks.com/aws/en/dev-tools/bundles/deployment-modes
    https://github.com/databricks/cli/blob/main/bundle/config/mutator/resourcemutator/validate_target_mode.go
    https://github.com/databricks/cli/blob/main/bundle/permissions/workspace_root.go"""
    root_path = BUNDLES[target].settings.get("workspace", {}).get("root_path", "")
    assert root_path.startswith("/Workspace/"), root_path
    assert "${workspace.current_user" not in root_path, root_path
    assert not root_path.startswith("/Workspace/Shared/"), root_path
    # Two people deploying with the same variables land in the same folder.
    other = load_bundle(target=target).settings["workspace"]["root_path"]
    assert other == root_path


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", REQUIRED)
def test_a_deploy_without_a_required_variable_fails_naming_it(target: str, name: str) -> None:
    """A variable without a default must be given, or the CLI stops before deploying:
    "no value assigned to required variable <name>. Variables are usually assigned in
    databricks.yml, and they can be overridden using "--var", the BUNDLE_VAR_<name>
    environment variable, or .databricks/bundle/<target>/variable-overrides.json".
    https://github.com/databricks/cli/blob/main/bundle/config/mutator/set_variables.go
    https://docs.databricks.com/aws/en/dev-tools/bundles/variables"""
    declared = root_config()["variables"][name]
    target_value = (root_config()["targets"][target].get("variables") or {}).get(name)
    if name == "run_as_service_principal" and target not in PRODUCTION:
        # Outside production the jobs run as whoever deploys: the target says so.
        assert target_value == "", target_value
        return
    assert "default" not in declared and target_value is None, (name, declared, target_value)
    given = {k: v for k, v in DEPLOY_VARS.items() if k != name}
    with pytest.raises(MissingVariable, match=rf"required variable {name}$"):
        variable_values(target, given)


def test_no_variable_defaults_to_a_placeholder() -> None:
    """An example address as a default deploys a relay that can reach nothing."""
    root = root_config()
    defaults = [(n, s["default"]) for n, s in root["variables"].items() if "default" in s]
    for target in root["targets"].values():
        defaults += list((target.get("variables") or {}).items())
    for name, value in defaults:
        assert not re.search(r"example\.(com|org)|set-the-|<", str(value)), (name, value)


@pytest.mark.parametrize("target", TARGETS)
def test_every_app_passes_the_bundle_model(target: str) -> None:
    for key, app in BUNDLES[target].apps.items():
        assert App.from_dict(app).as_dict() == app, f"{key}: the model dropped or changed a field"


def test_each_target_deploys_an_app_of_its_own_name() -> None:
    """Development mode prefixes the names of jobs, pipelines and the like, but "Apps: No
    presets": an app keeps its name in every target, and a name "must be unique within
    the workspace", so a second target's deploy would take over the first's app.
    https://github.com/databricks/cli/blob/main/bundle/config/mutator/resourcemutator/apply_presets.go
    https://docs.databricks.com/api/workspace/apps/create"""
    names = {t: sorted(a["name"] for a in b.apps.values()) for t, b in BUNDLES.items()}
    flat = [n for per_target in names.values() for n in per_target]
    assert flat and len(flat) == len(set(flat)), names
    assert all(APP_NAME.fullmatch(n) for n in flat), names


def test_the_first_deploy_checklist_sets_every_required_variable() -> None:
    """docs/databricks.md's variable-overrides.json, the file the CLI reads for a target
    (.databricks/bundle/<target>/variable-overrides.json, set_variables.go), names every
    variable a deploy cannot go without, and only variables the bundle declares."""
    page = (REPO / "docs" / "databricks.md").read_text(encoding="utf-8")
    checklist = page.split("## The first deploy")[1].split("\n## ")[0]
    (block,) = re.findall(r"```json\n(.*?)```", checklist, re.DOTALL)
    example = json.loads(block)
    declared = root_config()["variables"]
    assert {n for n, spec in declared.items() if "default" not in spec} <= set(example)
    assert set(example) <= set(declared), set(example) - set(declared)

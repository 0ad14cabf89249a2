"""The cluster tier's fixtures: one Spark standalone cluster per session (a master and two
workers, separate JVMs), the relay package shipped to its executors, and an outbox whose
PostgreSQL role must give a password that only the driver has."""

from __future__ import annotations

import contextlib
import time
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest

from outbox_relay.config.load import PASSWORD_ENV, build_config
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import migrate
from outbox_relay.stack import StackInfo
from tests.cluster.secured_db import SecuredRole, refused_without_password, secured_role
from tests.cluster.standalone import StandaloneCluster
from tests.faults.conftest import (  # the fault report's scenario figures
    long_mode,
    pytest_runtest_makereport,
    scenario,
)
from tests.faults.infra import database_url
from tests.faults.recorders import drop_database, install_recorders
from tests.faults.relay_proc import REPO

__all__ = ["long_mode", "pytest_runtest_makereport", "scenario"]

WORKERS = 2


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    started = time.monotonic()
    standalone = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"))
    try:
        standalone.start(WORKERS)
        standalone.started_s = time.monotonic() - started
        yield standalone
    finally:
        standalone.stop()


@pytest.fixture(scope="module", autouse=True)
def _two_workers(cluster: StandaloneCluster) -> None:
    """Every module starts with two live workers: one that killed a worker leaves a
    replacement for the next."""
    cluster.ensure_workers(WORKERS)


@pytest.fixture(scope="session")
def relay_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `outbox_relay` package of this checkout, for `spark-submit --py-files`.

    Shipped rather than installed on the nodes: the only interpreter here is the repo's
    venv, whose editable install points at a checkout, a driver-side file no cluster node
    has. Spark's own channel brings the executors the driver's code (the Python worker
    puts it first on sys.path, ahead of that editable finder); the third-party
    dependencies (pydantic, psycopg2) come from the node's interpreter, as cluster
    libraries do on Databricks, where the project's wheel plays this zip's part.
    """
    path = tmp_path_factory.mktemp("py-files") / "outbox_relay.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted((REPO / "outbox_relay").rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                zf.write(file, file.relative_to(REPO))
    return path


@pytest.fixture(scope="session")
def role(stack: StackInfo) -> Iterator[SecuredRole]:
    with secured_role(stack.postgres_url) as secured:
        yield secured


@dataclass(frozen=True)
class ClusterDb:
    """An outbox owned by the secured role. `admin_url` (superuser, trusted) is the
    test's own view; `relay_url` names the role without its password, which the driver
    alone gets, from its environment."""

    admin_url: str
    relay_url: str
    password: str

    @property
    def driver_env(self) -> dict[str, str]:
        return {PASSWORD_ENV: self.password}


@contextlib.contextmanager
def owned_database(stack: StackInfo, role: SecuredRole) -> Iterator[ClusterDb]:
    """A new database owned by the secured role, migrated by it, with the recorders."""
    name = f"c_{uuid.uuid4().hex[:12]}"
    conn = psycopg2.connect(stack.postgres_url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}" OWNER {role.name}')  # generated identifiers
    conn.close()
    admin_url = database_url(stack.postgres_url, name)
    host = stack.postgres_url.split("@", 1)[1].rpartition("/")[0]
    relay_url = f"postgresql://{role.name}@{host}/{name}"
    if role.enforced:
        assert refused_without_password(relay_url), "pg_hba must demand the role's password"
    config = build_config({"postgres": {"url": relay_url, "sslmode": "disable"}},
                          env={PASSWORD_ENV: role.password})
    db = Database(config.postgres)
    try:
        migrate(db)  # as the role: it owns the relay's tables, as in production
    finally:
        db.close()
    # The recorders' tables and triggers belong to the role, which fires them.
    install_recorders(relay_url.replace(f"{role.name}@", f"{role.name}:{role.password}@"))
    try:
        yield ClusterDb(admin_url, relay_url, role.password)
    finally:
        drop_database(stack.postgres_url, admin_url)


@pytest.fixture(scope="module")
def cluster_db(stack: StackInfo, role: SecuredRole) -> Iterator[ClusterDb]:
    with owned_database(stack, role) as db:
        yield db

"""Relays submitted to the standalone cluster, and what the cluster shows of them: which
application it ran, where its executors ran, and what those processes could see."""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from outbox_relay.config import Config
from outbox_relay.config.load import PASSWORD_ENV
from outbox_relay.stack import StackInfo
from tests.cluster.conftest import ClusterDb
from tests.cluster.standalone import StandaloneCluster, Worker
from tests.faults.infra import wait_until
from tests.faults.relay_proc import RelayProc, relay_config, start_relay

# Executors are JVMs in the workers, each worker offering 1 core and 1 GB.
EXECUTOR_MEMORY = "768m"


def cluster_config(db: ClusterDb, stack: StackInfo, topics: Sequence[str], name: str,
                   bootstrap: str | None = None, **relay: Any) -> Config:
    """A profile whose ledger and checkpoint are relative paths: the driver resolves them
    against its own working directory, which no executor shares. The ledger is copied by
    Spark (`ledger.writer = "spark"`), whose tasks run in the executors: `auto` would
    copy it with delta-rs in the driver, and a claim of at most ONE_TASK_ROWS rows is
    read by one task, so without the copies one worker could be left without a task."""
    return relay_config(
        db.relay_url, bootstrap or stack.kafka_bootstrap, Path("."), topics=topics,
        source_name=name,
        ledger={"path": "ledger", "writer": "spark"},
        relay={"checkpoint_path": "checkpoint", "read_partitions": 4,
               "lock_timeout_s": 20, "heartbeat_interval_s": 2, **relay},
        spark={"app_name": f"relay-cluster-{name}-{uuid.uuid4().hex[:6]}",
               "shuffle_partitions": 4},
    )


def with_kafka_secrets(config: Config, java: dict[str, str],
                       librdkafka: dict[str, str]) -> Config:
    """The profile names Kafka's secrets as `env:NAME`, resolved by the driver from its
    own environment. model_copy does not validate, so the references stay unresolved
    here, in the test process, and reach the profile as written."""
    kafka = config.kafka.model_copy(update={"java_options": java,
                                            "librdkafka_options": librdkafka})
    return config.model_copy(update={"kafka": kafka})


def driver_dir(workdir: Path) -> Path:
    """The driver's working directory: relative paths of the profile resolve here."""
    return workdir / "driver"


def submit(cluster: StandaloneCluster, relay_zip: Path, db: ClusterDb, config: Config,
           workdir: Path, name: str, *, available_now: bool = False,
           env: dict[str, str] | None = None) -> RelayProc:
    """`spark-submit --master spark://... --py-files outbox_relay.zip jobs/relay.py`, with the
    database password (and `env`) in the driver's environment only."""
    cwd = driver_dir(workdir)
    cwd.mkdir(parents=True, exist_ok=True)
    args = ["--master", cluster.url, "--py-files", str(relay_zip),
            "--conf", f"spark.executor.memory={EXECUTOR_MEMORY}"]
    return start_relay(config, workdir, name, available_now=available_now,
                       env={**db.driver_env, **(env or {})}, submit_args=args, cwd=cwd)


def application(cluster: StandaloneCluster, app_name: str) -> dict[str, Any] | None:
    """The master's record of the application named `app_name` (active or completed)."""
    state = cluster.state() or {}
    apps = [*state.get("activeapps", []), *state.get("completedapps", [])]
    return next((a for a in apps if a.get("name") == app_name), None)


def wait_application(cluster: StandaloneCluster, app_name: str, proc: RelayProc) -> str:
    found: list[str] = []

    def registered() -> bool:
        app = application(cluster, app_name)
        if app is not None:
            found.append(str(app["id"]))
        return bool(found)

    wait_until(registered, 300, f"the master to register {app_name}", diagnose=proc.tail)
    return found[0]


@dataclass(frozen=True)
class Placement:
    """Where an application's executors ran, from the workers' own directories."""

    executors: dict[str, int]  # worker -> executors it launched for the application
    tasks: dict[str, int]  # worker -> tasks its executors logged as started
    shipped: dict[str, bool]  # worker -> the relay zip was fetched into its executor dirs

    def figures(self) -> dict[str, Any]:
        return {"executors_per_worker": self.executors, "tasks_per_worker": self.tasks}


def placement(cluster: StandaloneCluster, app_id: str) -> Placement:
    executors: dict[str, int] = {}
    tasks: dict[str, int] = {}
    shipped: dict[str, bool] = {}
    for worker, dirs in cluster.app_dirs(app_id).items():
        executors[worker] = len(dirs)
        tasks[worker] = sum(_log(d / "stderr").count("Running task ") for d in dirs)
        shipped[worker] = any((d / "outbox_relay.zip").is_file() for d in dirs)
    return Placement(executors, tasks, shipped)


def running_tasks(cluster: StandaloneCluster, worker: Worker, app_id: str) -> int:
    """Tasks the worker's executors of `app_id` logged as started and not yet finished."""
    text = "".join(_log(d / "stderr") for d in cluster.app_dirs(app_id).get(worker.name, []))
    return text.count("Running task ") - text.count("Finished task ")


def _log(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class Seen:
    pid: int
    cmdline: str
    env: dict[str, str]
    cwd: str


def worker_processes(cluster: StandaloneCluster,
                     workers: Sequence[Worker] | None = None) -> list[Seen]:
    """Every live process below the (live) worker JVMs: executor JVMs and their Python
    workers."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    roots = {w.proc.pid for w in (cluster.live_workers() if workers is None else workers)}
    below: list[int] = []
    frontier = set(roots)
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier}
        below += sorted(frontier)
    seen = []
    for pid in below:
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        env = dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)
        seen.append(Seen(pid, cmd, env, cwd))
    return seen


def leaks(seen: Sequence[Seen], secrets: Sequence[str], driver_cwd: Path) -> list[str]:
    """What of the driver's a worker-side process has: a secret anywhere in its
    environment or command line, a RELAY_* variable, or the driver's working directory."""
    found = []
    for p in seen:
        for n, secret in enumerate(secrets):
            if secret in p.cmdline or any(secret in v for v in p.env.values()):
                found.append(f"pid {p.pid} holds secret #{n}")
        found += [f"pid {p.pid} has {k}" for k in p.env if k.startswith("RELAY_")]
        if PASSWORD_ENV in p.env:
            found.append(f"pid {p.pid} has {PASSWORD_ENV}")
        if Path(p.cwd).resolve() == driver_cwd.resolve():
            found.append(f"pid {p.pid} runs in the driver's working directory")
    return found

"""A Spark standalone cluster on 127.0.0.1: a master and workers as separate JVMs, started
from the classes the pyspark distribution ships (`bin/spark-class`), as a cluster's
daemons would be.

Every daemon starts from `env -i` with only PATH, JAVA_HOME, SPARK_HOME, an empty
SPARK_CONF_DIR and a HOME, SPARK_LOCAL_DIRS and working directory of its own: nothing of
the test process (credentials, PYTHONPATH, the relay's RELAY_* variables, its cwd) can
reach an executor except through what Spark itself ships from the driver.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark

from outbox_relay.stack.proc import HOST, pick_free_ports

SPARK_HOME = Path(pyspark.__file__).resolve().parent
WORKER_CORES = 1
WORKER_MEMORY = "1g"
_START_TIMEOUT_S = 120.0


def _java_home() -> str:
    home = os.environ.get("JAVA_HOME")
    if home:
        return home
    java = shutil.which("java")
    assert java, "Java 17 is on PATH"
    return str(Path(java).resolve().parents[1])


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    home: Path
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            text = []
        return f"--- {self.name} ---\n" + "\n".join(text[-lines:])


@dataclass
class Worker(Daemon):
    work_dir: Path = field(default_factory=Path)


@dataclass
class StandaloneCluster:
    root: Path
    master_port: int = 0
    ui_port: int = 0
    master: Daemon | None = None
    workers: list[Worker] = field(default_factory=list)
    started_s: float = 0.0  # master and workers up and registered

    @property
    def url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    def _spawn(self, name: str, main_class: str, *args: str) -> tuple[subprocess.Popen[bytes],
                                                                     Path, Path]:
        home = self.root / name
        home.mkdir(parents=True)
        (self.root / "conf").mkdir(exist_ok=True)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "JAVA_HOME": _java_home(),
            "SPARK_HOME": str(SPARK_HOME),
            # Empty: no spark-env.sh or spark-defaults.conf of this machine takes part.
            "SPARK_CONF_DIR": str(self.root / "conf"),
            "HOME": str(home),
            "SPARK_LOCAL_DIRS": str(home / "local"),
        }
        log = self.root / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                ["env", "-i", *(f"{k}={v}" for k, v in env.items()),
                 str(SPARK_HOME / "bin" / "spark-class"), main_class, *args],
                cwd=home, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C of pytest must not reach the daemons
            )
        return proc, home, log

    def start(self, workers: int) -> None:
        self.master_port, self.ui_port = pick_free_ports(2)
        proc, home, log = self._spawn(
            "master", "org.apache.spark.deploy.master.Master",
            "--host", HOST, "--port", str(self.master_port), "--webui-port", str(self.ui_port))
        self.master = Daemon("master", proc, home, log)
        self._wait(lambda: self.state() is not None, "the master's web UI")
        for _ in range(workers):
            self.add_worker()
        self.wait_workers(workers)

    def add_worker(self) -> Worker:
        name = f"worker-{len(self.workers) + 1}"
        port, ui = pick_free_ports(2)
        work_dir = self.root / name / "work"
        proc, home, log = self._spawn(
            name, "org.apache.spark.deploy.worker.Worker",
            "--host", HOST, "--port", str(port), "--webui-port", str(ui),
            "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
            "--work-dir", str(work_dir), self.url)
        worker = Worker(name, proc, home, log, work_dir)
        self.workers.append(worker)
        return worker

    def live_workers(self) -> list[Worker]:
        return [w for w in self.workers if w.alive()]

    def ensure_workers(self, count: int) -> None:
        """Start replacements until `count` workers are alive and registered."""
        while len(self.live_workers()) < count:
            self.add_worker()
        self.wait_workers(count)

    def wait_workers(self, count: int) -> None:
        self._wait(lambda: self.alive_workers() >= count, f"{count} workers to register")

    def state(self) -> dict[str, Any] | None:
        """The master's state as its web UI serves it at /json."""
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.ui_port}/json/", timeout=5) as r:
                return dict(json.load(r))
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> int:
        state = self.state() or {}
        return sum(w.get("state") == "ALIVE" for w in state.get("workers", []))

    def app_dirs(self, app_id: str) -> dict[str, list[Path]]:
        """Executor directories each worker made for an application (name -> dirs), for
        every worker alive or that took part in it: a worker an earlier test killed, dead
        before the application, is none of its workers."""
        dirs = {w.name: sorted(p for p in (w.work_dir / app_id).glob("*") if p.is_dir())
                for w in self.workers}
        return {w.name: dirs[w.name] for w in self.workers if w.alive() or dirs[w.name]}

    def kill_worker(self, worker: Worker) -> None:
        """SIGKILL the worker's JVM alone, as a node crash would; its executors notice the
        lost worker themselves and exit (Spark's WorkerWatcher)."""
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait(timeout=30)

    def _wait(self, condition: Any, what: str) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not condition():
            daemons = [self.master, *self.workers]
            dead = [d for d in daemons if d is not None and not d.alive()
                    and not (isinstance(d, Worker) and d.proc.returncode == -signal.SIGKILL)]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(d.tail() for d in daemons if d is not None)
                raise AssertionError(f"Spark standalone cluster: no {what}\n{logs}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Workers first (they kill their executors), then the master."""
        for daemon in [*self.workers, self.master]:
            if daemon is None or not daemon.alive():
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.proc.pid, signal.SIGTERM)
            try:
                daemon.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(daemon.proc.pid, signal.SIGKILL)
                daemon.proc.wait(timeout=30)

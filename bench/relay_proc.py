"""Runs the relay as the product runs: ``spark-submit jobs/relay.py --config <profile>``.

The profile is rendered from a Config by the integration tests' ``write_profile``. The
driver's peak RSS (VmHWM of its Python process) and its JVM's peak RSS are sampled
from /proc while it runs; the JVM writes a GC log from which the heap in use after
each collection is read.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import DRIVER_MEMORY
from bench.procs import gc_summary, kill_group, live_summary, relay_driver, signal_group, status_kb
from outbox_relay.config import Config
from tests.integration.process import write_profile

REPO = Path(__file__).resolve().parents[1]

# The liveness log's decorators (the JVM's defaults) and no rotation: a 5M drain writes
# more than the default 20 MB a file, and every marking must be read.
LIVE_LOG_TAIL = "uptime,level,tags:filecount=0"
_SUMMARY = re.compile(r"outbox-relay: (\d+) messages delivered in ([\d.]+) s \((\d+) batches\)")
# The relay's log line when a copy batch is in Delta (outbox_relay.ledger.delta), local time.
_COPY_LANDED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO "
                          r"outbox_relay\.ledger\.delta: ledger: copy batch \d+ is in Delta", re.M)


def last_copy_landed(log_text: str) -> float | None:
    """When the relay's last ledger copy landed in Delta, as epoch seconds."""
    found = _COPY_LANDED.findall(log_text)
    return datetime.strptime(found[-1], "%Y-%m-%d %H:%M:%S,%f").timestamp() if found else None


@dataclass
class RelayProcess:
    proc: subprocess.Popen[bytes]
    launched_at: float
    log: Path
    gc_dir: Path
    driver_pid: int | None = None
    jvm_pid: int | None = None
    driver_hwm_kb: int = 0
    jvm_hwm_kb: int = 0
    exited_at: float | None = None
    _done: threading.Event = field(default_factory=threading.Event)
    _sampler: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._done.is_set() and self.proc.poll() is None:
            driver, jvm = relay_driver(self.proc.pid)
            if driver is not None:
                self.driver_pid = driver
                self.driver_hwm_kb = max(self.driver_hwm_kb, status_kb(driver, "VmHWM") or 0)
            if jvm is not None:
                self.jvm_pid = jvm
                self.jvm_hwm_kb = max(self.jvm_hwm_kb, status_kb(jvm, "VmHWM") or 0)
            self._done.wait(0.25)

    def start_sampling(self) -> None:
        self._sampler = threading.Thread(target=self._sample, name="bench-rss", daemon=True)
        self._sampler.start()

    def wait(self, timeout_s: float) -> int:
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
            code = -9
        self.exited_at = time.time()
        self._done.set()
        if self._sampler is not None:
            self._sampler.join()
        return code

    def terminate(self, timeout_s: float = 90.0) -> int:
        """SIGTERM to the process group (a graceful stop), then wait for the exit."""
        signal_group(self.proc, signal.SIGTERM)
        return self.wait(timeout_s)

    def driver_gc_log(self) -> Path | None:
        """The driver JVM's GC log (the launcher JVM of a relaunched driver logs too)."""
        return self.gc_dir / f"gc-{self.jvm_pid}.log" if self.jvm_pid is not None else None

    def summary(self) -> dict[str, Any]:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        m = _SUMMARY.search(text)
        gc = gc_summary(sorted(self.gc_dir.glob("gc-*.log")))
        own = self.driver_gc_log()
        if own is not None:
            if own.exists():
                gc = gc_summary([own])
            gc.update(live_summary(self.gc_dir / f"live-{self.jvm_pid}.log"))
        return {
            "delivered": int(m[1]) if m else None,
            "relay_seconds": float(m[2]) if m else None,
            "batches": int(m[3]) if m else None,
            "driver_peak_rss_mb": round(self.driver_hwm_kb / 1024, 1),
            "jvm_peak_rss_mb": round(self.jvm_hwm_kb / 1024, 1),
            **gc,
        }


def launch(
    config: Config,
    run_dir: Path,
    *args: str,
    driver_memory: str = DRIVER_MEMORY,
    extra_env: dict[str, str] | None = None,
    script: Path = REPO / "jobs" / "relay.py",
    live_set: bool = False,
) -> RelayProcess:
    """Start the relay (or another `script` taking --config, such as bench/probes/shape.py) in
    its own process group (its jars come from spark-defaults.conf). With `live_set`, the
    driver JVM also logs what each concurrent marking found live (W4): a line per heap
    region, a few MB a run, so only where it is read."""
    gc_dir = run_dir / "gc"
    shutil.rmtree(gc_dir, ignore_errors=True)
    gc_dir.mkdir(parents=True)
    java_opts = f"-Duser.timezone=UTC -Xlog:gc:file={gc_dir}/gc-%p.log"
    if live_set:
        java_opts += f" -Xlog:gc+liveness=trace:file={gc_dir}/live-%p.log:{LIVE_LOG_TAIL}"
    spark_conf = {
        **config.spark.conf,
        "spark.driver.memory": driver_memory,
        "spark.driver.extraJavaOptions": java_opts,
    }
    config = config.model_copy(
        update={"spark": config.spark.model_copy(update={"conf": spark_conf})}
    )
    profile = write_profile(config, run_dir / "profile.toml")
    submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent))
    assert submit, "spark-submit comes with pyspark"
    cmd = [submit, "--driver-memory", driver_memory, "--driver-java-options", java_opts]
    cmd += [str(script), "--config", str(profile), *args]
    log = run_dir / "relay.log"
    # The bench's stack is on 127.0.0.1, and so is this one-machine Spark.
    env = {"PYSPARK_PYTHON": sys.executable, "PATH": _path(), "SPARK_LOCAL_IP": "127.0.0.1",
           **(extra_env or {})}
    out = open(log, "wb")  # noqa: SIM115 - the child owns it
    launched = time.time()
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=_environ(env), stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    out.close()
    rp = RelayProcess(proc=proc, launched_at=launched, log=log, gc_dir=gc_dir)
    rp.start_sampling()
    return rp


def _path() -> str:
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def _environ(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(extra)
    return env

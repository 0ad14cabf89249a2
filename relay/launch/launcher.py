"""spark-submit without the relay's jars, on first use: its Python stays as the launcher of
a second spark-submit that has them.

spark-submit's JVM cannot load jars after it started. Normally `spark-defaults.conf`
brings them (`outbox-relay jars --install`, see relay.launch.spark_jars) and this never runs.
When it does, the second spark-submit gets this one's whole configuration (its master,
its --conf, its py-files) plus the jars, and the same application and arguments.
Supervisors (Kubernetes, Docker, supervisord) signal only the pid they started, this
spark-submit's: its JVM passes TERM and INT through py4j to this launcher, which forwards
them to the second one, and this spark-submit exits with that one's code.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from relay.exit_codes import ExitCode

log = logging.getLogger(__name__)

GATEWAY_ENV = ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How long the JVM's copy of a signal waits for the launcher's own copy of the same signal.
_SAME_SIGNAL_S = 0.5


class Launcher:
    def __init__(self, jvm: Any, gateway: Any) -> None:
        self._jvm = jvm
        self._gateway = gateway
        self._child: subprocess.Popen[bytes] | None = None
        self._direct: dict[int, float] = {}
        self._pending: int | None = None  # came before the driver was started
        # Taken by the signal handler, which runs on the main thread, possibly while the
        # main thread holds it: reentrant, or the handler would deadlock.
        self._lock = threading.RLock()

    def run(self, argv: list[str], kept: Callable[[], bool] = lambda: False,
            stopped_code: int = ExitCode.OK) -> int:
        """Start `argv` (the driver), forward stop signals to it, return its exit code.

        A stop that came before the driver started ends the launch instead, with
        `stopped_code`: starting a driver only to stop it costs a JVM's start, and a
        signal sent to it before its own handler is in place would kill it outright.
        `kept` says whether a stop came before this launcher took the signals over.
        """
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_direct_signal)
        self._install_jvm_handlers()
        env = {k: v for k, v in os.environ.items() if k not in GATEWAY_ENV}
        # The driver stops itself when spark-submit's JVM is gone (even after a SIGKILL).
        env["RELAY_WATCH_PID"] = str(os.getppid())
        with self._lock:
            # Checked after our handlers took over, so no signal falls between the two.
            if self._pending is not None or kept():
                log.warning("stop requested before the driver started: not starting it")
                return stopped_code
            self._child = subprocess.Popen(argv, env=env)
            # A signal that came while it was being started: the driver may not have had
            # its own copy. A copy it had too falls within its echo window (relay.stream.stop).
            pending, self._pending = self._pending, None
        if pending is not None:
            os.kill(self._child.pid, pending)
        code = self._child.wait()
        # Killed by signal N: report 128 + N, as a shell does.
        return code if code >= 0 else 128 - code

    def _on_direct_signal(self, signum: int, frame: Any) -> None:
        # A signal to the whole process group: the driver received its own copy, unless
        # there is no driver yet.
        with self._lock:
            self._direct[signum] = time.monotonic()
            if self._child is None:
                self._pending = signum

    def _install_jvm_handlers(self) -> None:
        from pyspark.java_gateway import ensure_callback_server_started

        ensure_callback_server_started(self._gateway)
        forwarder = _JvmToChild(self)
        for sig in STOP_SIGNALS:
            name = sig.name[3:]
            self._jvm.sun.misc.Signal.handle(self._jvm.sun.misc.Signal(name), forwarder)

    def forward(self, signum: int) -> None:
        """A signal that reached spark-submit's JVM: forward it unless the driver had it.

        A group signal reaches the JVM, this launcher and the driver alike; forwarding it
        too would give the driver a late copy that it would take for a second signal.
        """
        arrived = time.monotonic()
        deadline = arrived + _SAME_SIGNAL_S
        while time.monotonic() < deadline:
            with self._lock:
                if self._direct.get(signum, float("-inf")) >= arrived - 1.0:
                    return
            time.sleep(0.05)
        with self._lock:
            child = self._child
            if child is None:
                self._pending = signum
                return
        if child.poll() is None:
            log.info("forwarding %s from spark-submit to the driver", signal.Signals(signum).name)
            os.kill(child.pid, signum)


class _JvmToChild:
    """sun.misc.SignalHandler, implemented in Python through py4j."""

    def __init__(self, launcher: Launcher) -> None:
        self._launcher = launcher

    def handle(self, sig: Any) -> None:
        self._launcher.forward(signal.Signals[f"SIG{sig.getName()}"])

    class Java:
        implements = ["sun.misc.SignalHandler"]


def resubmit_argv(conf: list[tuple[str, str]], jars: list[str], properties: Path) -> list[str]:
    """A spark-submit of this same application with `conf` plus `jars` in `spark.jars`.

    The configuration goes through a properties file (mode 0600: --conf values may be
    secret), which replaces spark-defaults.conf for that run as --properties-file does.
    """
    merged = dict(conf)
    merged.pop("spark.app.submitTime", None)
    present = [j for j in merged.get("spark.jars", "").split(",") if j]
    merged["spark.jars"] = ",".join([*present, *jars])
    properties.touch(mode=0o600)
    properties.write_text("".join(f"{_escape(k)}={_escape(v)}\n" for k, v in merged.items()))
    submit = Path(os.environ.get("SPARK_HOME", "")) / "bin" / "spark-submit"
    return [str(submit), "--properties-file", str(properties), *sys.argv]


def _escape(text: str) -> str:
    """java.util.Properties escaping: a value may hold '=', ':', '#' or a backslash."""
    out = text.replace("\\", "\\\\").replace("\n", "\\n")
    for ch in "=:#!":
        out = out.replace(ch, "\\" + ch)
    return out[:1].replace(" ", "\\ ") + out[1:]

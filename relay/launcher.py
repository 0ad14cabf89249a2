"""spark-submit without our packages: its Python stays as the launcher of a fresh driver.

spark-submit's JVM cannot load packages after it started, so the driver is relaunched
as plain Python (pyspark then starts a JVM with spark.jars.packages). Supervisors
(Kubernetes, Docker, supervisord) signal only the pid they started, spark-submit's: its
JVM passes TERM and INT through py4j to this launcher, which forwards them to the
relaunched driver, and spark-submit exits with the driver's code.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

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
        self._lock = threading.Lock()

    def run(self) -> int:
        """Start the driver, forward stop signals to it, return its exit code."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_direct_signal)
        self._install_jvm_handlers()
        env = {k: v for k, v in os.environ.items() if k not in GATEWAY_ENV}
        # The driver stops itself when spark-submit's JVM is gone (even after a SIGKILL).
        env["RELAY_WATCH_PID"] = str(os.getppid())
        with self._lock:
            self._child = subprocess.Popen([sys.executable, *sys.argv], env=env)
            pending, self._pending = self._pending, None
        if pending is not None:
            os.kill(self._child.pid, pending)
        code = self._child.wait()
        # Killed by signal N: report 128 + N, as a shell does.
        return code if code >= 0 else 128 - code

    def _on_direct_signal(self, signum: int, frame: Any) -> None:
        # A signal to the whole process group: the driver received its own copy.
        with self._lock:
            self._direct[signum] = time.monotonic()

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

"""spark-submit without the relay's jars, on first use: its Python stays as the launcher of
a second spark-submit that has them.

spark-submit's JVM cannot load jars after it started. Normally `spark-defaults.conf`
brings them (`outbox-relay jars --install`, see outbox_relay.launch.spark_jars) and this never runs.
When it does, the second spark-submit gets this one's whole configuration (its master,
its --conf, its py-files) plus the jars, and the same application and arguments.
Supervisors (Kubernetes, Docker, supervisord) signal only the pid they started, this
spark-submit's: its JVM passes TERM and INT through py4j to this launcher, which passes
them on to the second one, and this spark-submit exits with that one's code.

The second one runs in a process group of its own, and gets a stop only once its Python
driver can take it (it says so by a file, READY_ENV): a TERM that reached its JVM while
that JVM was still starting killed it, and the launch exited 143, which is no exit code
of the relay's. A stop that comes before is kept and passed on then; a second one
before it exits at once, as a second signal always does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from outbox_relay.exit_codes import ExitCode

log = logging.getLogger(__name__)

GATEWAY_ENV = ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")
# The file a driver started by this launcher creates once its stop handlers are in place.
READY_ENV = "RELAY_READY_FILE"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How long the JVM's copy of a signal waits for the launcher's own copy of the same signal.
_SAME_SIGNAL_S = 0.5
# Copies of one stop arrive within this much of each other (outbox_relay.stream.stop's window).
_ECHO_WINDOW_S = 1.0
_READY_POLL_S = 0.05


def announce_ready() -> None:
    """For a driver this launcher started: its stop handlers are in place, so the
    launcher may pass a stop on now."""
    path = os.environ.get(READY_ENV)
    if path:
        Path(path).touch()


class Launcher:
    def __init__(self, jvm: Any, gateway: Any) -> None:
        self._jvm = jvm
        self._gateway = gateway
        self._child: subprocess.Popen[bytes] | None = None
        self._ready = False  # the driver's handlers are in place
        self._direct: dict[int, float] = {}
        self._pending: int | None = None  # came before the driver could take it
        self._pending_at = float("-inf")
        self._at_once = False  # a second stop came before the driver could take the first
        # Taken by the signal handler, which runs on the main thread, possibly while the
        # main thread holds it: reentrant, or the handler would deadlock.
        self._lock = threading.RLock()

    def run(self, argv: list[str], kept: Callable[[], bool] = lambda: False,
            stopped_code: int = ExitCode.OK) -> int:
        """Start `argv` (the driver), pass stop signals on to it, return its exit code.

        A stop that came before the driver started ends the launch instead, with
        `stopped_code`: starting a driver only to stop it costs a JVM's start.
        `kept` says whether a stop came before this launcher took the signals over.
        """
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_direct_signal)
        self._install_jvm_handlers()
        env = {k: v for k, v in os.environ.items() if k not in GATEWAY_ENV}
        # The driver stops itself when spark-submit's JVM is gone (even after a SIGKILL).
        env["RELAY_WATCH_PID"] = str(os.getppid())
        with tempfile.TemporaryDirectory(prefix="outbox-relay-launch-") as tmp:
            ready = Path(tmp) / "ready"
            env[READY_ENV] = str(ready)
            with self._lock:
                # Checked after our handlers took over, so no signal falls between the two.
                if self._pending is not None or kept():
                    log.warning("stop requested before the driver started: not starting it")
                    return stopped_code
                # A group of its own, so that no signal to this launcher's group reaches
                # the driver before it can take one: this launcher passes each on.
                self._child = subprocess.Popen(argv, env=env, process_group=0)
            waiter = threading.Thread(target=self._pass_on_when_ready, args=(ready,),
                                      name="relay-launch-ready", daemon=True)
            waiter.start()
            code = self._child.wait()
            waiter.join()
        if self._at_once:
            return ExitCode.AT_ONCE
        # Killed by signal N: report 128 + N, as a shell does.
        return code if code >= 0 else 128 - code

    def _pass_on_when_ready(self, ready: Path) -> None:
        """Waits for the driver's handlers, then passes on a stop that came before."""
        child = self._child
        assert child is not None
        while child.poll() is None and not ready.exists():
            time.sleep(_READY_POLL_S)
        with self._lock:
            self._ready = True
            pending, self._pending = self._pending, None
        if pending is not None:
            self._kill(pending)

    def _on_direct_signal(self, signum: int, frame: Any) -> None:
        # A signal to this launcher's process group (the driver has a group of its own).
        with self._lock:
            self._direct[signum] = time.monotonic()
        self._pass_on(signum)

    def _install_jvm_handlers(self) -> None:
        from pyspark.java_gateway import ensure_callback_server_started

        ensure_callback_server_started(self._gateway)
        forwarder = _JvmToChild(self)
        for sig in STOP_SIGNALS:
            name = sig.name[3:]
            self._jvm.sun.misc.Signal.handle(self._jvm.sun.misc.Signal(name), forwarder)

    def forward(self, signum: int) -> None:
        """A signal that reached spark-submit's JVM: passed on unless it is the JVM's copy
        of a signal to the group, which this launcher received as well."""
        arrived = time.monotonic()
        deadline = arrived + _SAME_SIGNAL_S
        while time.monotonic() < deadline:
            with self._lock:
                if self._direct.get(signum, float("-inf")) >= arrived - 1.0:
                    return
            time.sleep(0.05)
        self._pass_on(signum)

    def _pass_on(self, signum: int) -> None:
        """To the driver if it can take it; else kept for it. A second stop (past the echo
        window) kept meanwhile ends the driver at once."""
        now = time.monotonic()
        with self._lock:
            if not self._ready:
                if self._pending is None:
                    self._pending, self._pending_at = signum, now
                elif now - self._pending_at > _ECHO_WINDOW_S and self._child is not None:
                    self._at_once = True
                    log.error("second stop signal before the driver could take the first: "
                              "ending it at once")
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self._child.pid, signal.SIGKILL)
                return
        self._kill(signum)

    def _kill(self, signum: int) -> None:
        child = self._child
        if child is not None and child.poll() is None:
            log.info("passing %s on to the driver", signal.Signals(signum).name)
            with contextlib.suppress(ProcessLookupError):
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

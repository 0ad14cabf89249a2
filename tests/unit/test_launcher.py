"""The launcher passes a stop signal on to the driver once the driver can take it, and
never twice (a group signal's copy from the JVM would count as a second signal)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from outbox_relay.exit_codes import ExitCode
from outbox_relay.launch import launcher as launcher_module
from outbox_relay.launch.launcher import Launcher


@dataclass
class FakeChild:
    pid: int = 4242

    def poll(self) -> int | None:
        return None


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(launcher_module.os, "kill", lambda pid, sig: calls.append((pid, sig)))
    monkeypatch.setattr(launcher_module, "_SAME_SIGNAL_S", 0.05)
    return calls


def _launcher() -> Launcher:
    """A launcher whose driver started and said its handlers are in place."""
    launcher = Launcher(jvm=None, gateway=None)
    launcher._child = FakeChild()  # type: ignore[assignment]
    launcher._ready = True
    return launcher


def test_a_signal_to_spark_submit_alone_is_forwarded(sent: list[tuple[int, int]]) -> None:
    _launcher().forward(signal.SIGTERM)
    assert sent == [(4242, signal.SIGTERM)]


def test_the_jvm_copy_of_a_group_signal_is_not_forwarded(sent: list[tuple[int, int]]) -> None:
    """The driver has a process group of its own: the launcher passes the group's signal
    on itself, once, and not the JVM's copy of it too (a second signal)."""
    launcher = _launcher()
    launcher._on_direct_signal(signal.SIGINT, None)
    launcher.forward(signal.SIGINT)
    assert sent == [(4242, signal.SIGINT)]
    launcher.forward(signal.SIGTERM)  # another signal is not that copy
    assert sent == [(4242, signal.SIGINT), (4242, signal.SIGTERM)]


def test_a_signal_before_the_driver_started_is_kept(sent: list[tuple[int, int]]) -> None:
    launcher = Launcher(jvm=None, gateway=None)
    launcher.forward(signal.SIGTERM)
    assert sent == [] and launcher._pending == signal.SIGTERM


# A stand-in driver: leaves a file when it started, takes TERM as its stop after a delay
# (a JVM's start, during which TERM kills it), says so as a driver does (announce_ready,
# and, given a FIFO, there too), then exits 3 when stopped, 0 when no stop came within its
# bound (a lost signal).
_DRIVER = """
import os, pathlib, signal, sys, threading, time
pathlib.Path(sys.argv[1]).write_text("started")
time.sleep(float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)
stopped = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stopped.set())
pathlib.Path(os.environ["RELAY_READY_FILE"]).touch()
if sys.argv[2] != "-":
    pathlib.Path(sys.argv[2]).write_text("ready")
sys.exit(3 if stopped.wait(float(sys.argv[3])) else 0)
"""


class _NoJvmLauncher(Launcher):
    """The launcher without spark-submit's JVM; `before_start` runs where the JVM's
    handlers are installed, the last step before the driver starts."""

    def __init__(self, before_start: Callable[[Launcher], None] = lambda _: None) -> None:
        super().__init__(jvm=None, gateway=None)
        self._before_start = before_start

    def _install_jvm_handlers(self) -> None:
        self._before_start(self)


@pytest.fixture
def driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[str], Path]]:
    """A real driver's argv and the file it leaves when it started; the test process's
    stop handlers are restored."""
    monkeypatch.setattr(launcher_module, "_SAME_SIGNAL_S", 0.05)
    saved = {sig: signal.getsignal(sig) for sig in launcher_module.STOP_SIGNALS}
    started = tmp_path / "started"
    yield [sys.executable, "-c", _DRIVER, str(started), "-", "10"], started
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_a_group_signal_before_the_driver_started_ends_the_launch(
        driver: tuple[list[str], Path]) -> None:
    """TERM to the process group before the driver exists: the launcher's own copy and the
    JVM's copy arrive; neither may be taken for a copy the driver received itself."""

    def group_signal(launcher: Launcher) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # the launcher's own copy
        launcher.forward(signal.SIGTERM)  # the JVM's copy

    argv, started = driver
    began = time.monotonic()
    code = _NoJvmLauncher(group_signal).run(argv)
    assert (code, started.exists()) == (ExitCode.OK, False)
    assert time.monotonic() - began < 5


def test_a_jvm_signal_kept_before_the_driver_started_ends_the_launch(
        driver: tuple[list[str], Path]) -> None:
    argv, started = driver
    code = _NoJvmLauncher(lambda launcher: launcher.forward(signal.SIGTERM)).run(argv)
    assert (code, started.exists()) == (ExitCode.OK, False)


@pytest.mark.parametrize("mode_code", [ExitCode.OK, ExitCode.INTERRUPTED])
def test_a_stop_before_the_launcher_took_the_signals_ends_the_launch(
        driver: tuple[list[str], Path], mode_code: ExitCode) -> None:
    """A stop that app.main's own handler recorded while the jars were resolved: the
    launch ends with the mode's code (continuous OK, available-now INTERRUPTED)."""
    argv, started = driver
    code = _NoJvmLauncher().run(argv, kept=lambda: True, stopped_code=mode_code)
    assert (code, started.exists()) == (mode_code, False)


def test_a_signal_after_the_driver_started_is_delivered(
        driver: tuple[list[str], Path], tmp_path: Path) -> None:
    argv, _ = driver
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    argv[-2] = str(fifo)
    launcher = _NoJvmLauncher()

    def stop_once_ready() -> None:
        fifo.read_text()  # blocks until the driver opened its end: its handler is in place
        launcher.forward(signal.SIGTERM)

    thread = threading.Thread(target=stop_once_ready, daemon=True)
    thread.start()
    code = launcher.run(argv)
    thread.join()
    assert code == 3  # the driver's own stop, not its 10 s bound


def test_a_stop_while_the_driver_starts_waits_for_its_handlers(
        driver: tuple[list[str], Path]) -> None:
    """TERM to spark-submit just after the driver started, while its JVM still starts (here:
    1 s before its handler is in place): passed on then, it killed the driver (143). It
    is passed on once the driver says it is ready, and the driver stops as it should."""
    argv, started = driver
    argv.append("1.0")
    launcher = _NoJvmLauncher()

    def stop_once_started() -> None:
        while not started.exists():
            time.sleep(0.01)
        launcher.forward(signal.SIGTERM)

    thread = threading.Thread(target=stop_once_started, daemon=True)
    thread.start()
    code = launcher.run(argv)
    thread.join()
    assert code == 3, "the driver's own stop, not a death by the signal (143)"


def test_a_second_stop_before_the_driver_is_ready_ends_it_at_once(
        driver: tuple[list[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher_module, "_ECHO_WINDOW_S", 0.1)
    argv, started = driver
    argv.append("30")  # never ready within the test
    launcher = _NoJvmLauncher()

    def stop_twice() -> None:
        while not started.exists():
            time.sleep(0.01)
        launcher.forward(signal.SIGTERM)
        time.sleep(0.3)
        launcher.forward(signal.SIGTERM)

    thread = threading.Thread(target=stop_twice, daemon=True)
    began = time.monotonic()
    thread.start()
    code = launcher.run(argv)
    thread.join()
    assert code == ExitCode.AT_ONCE
    assert time.monotonic() - began < 10

"""The launcher forwards a signal that only spark-submit's JVM received, and never a copy
of a group signal that the driver received itself (it would count as a second signal)."""

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

from relay.exit_codes import ExitCode
from relay.launch import launcher as launcher_module
from relay.launch.launcher import Launcher


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
    launcher = Launcher(jvm=None, gateway=None)
    launcher._child = FakeChild()  # type: ignore[assignment]
    return launcher


def test_a_signal_to_spark_submit_alone_is_forwarded(sent: list[tuple[int, int]]) -> None:
    _launcher().forward(signal.SIGTERM)
    assert sent == [(4242, signal.SIGTERM)]


def test_the_jvm_copy_of_a_group_signal_is_not_forwarded(sent: list[tuple[int, int]]) -> None:
    launcher = _launcher()
    launcher._on_direct_signal(signal.SIGINT, None)
    launcher.forward(signal.SIGINT)
    assert sent == []
    launcher.forward(signal.SIGTERM)  # another signal is not that copy
    assert sent == [(4242, signal.SIGTERM)]


def test_a_signal_before_the_driver_started_is_kept(sent: list[tuple[int, int]]) -> None:
    launcher = Launcher(jvm=None, gateway=None)
    launcher.forward(signal.SIGTERM)
    assert sent == [] and launcher._pending == signal.SIGTERM


# A stand-in driver: takes TERM as its stop, leaves a file when it started (and, given a
# FIFO, says there that its handler is in place), then exits 3 when stopped, 0 when no stop
# came within its bound (a lost signal).
_DRIVER = """
import pathlib, signal, sys, threading
stopped = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stopped.set())
pathlib.Path(sys.argv[1]).write_text("started")
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

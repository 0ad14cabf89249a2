"""The launcher forwards a signal that only spark-submit's JVM received, and never a copy
of a group signal that the driver received itself (it would count as a second signal)."""

from __future__ import annotations

import signal
from dataclasses import dataclass

import pytest

from relay import launcher as launcher_module
from relay.launcher import Launcher


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

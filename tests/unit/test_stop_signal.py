from __future__ import annotations

import threading
import time

import pytest

from relay.stream import stop as stop_module
from relay.stream.stop import StopSignal


def test_first_request_sets_the_flag_and_echoes_are_one_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exits: list[int] = []
    monkeypatch.setattr(stop_module.os, "_exit", exits.append)
    stop = StopSignal()
    assert not stop.requested
    stop.request("SIGTERM")
    stop.request("SIGTERM to the JVM")  # the same group signal, seen by the JVM too
    assert stop.requested and exits == []


def test_a_later_second_signal_exits_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[int] = []
    monkeypatch.setattr(stop_module.os, "_exit", exits.append)
    monkeypatch.setattr(stop_module, "_ECHO_WINDOW_S", 0.01)
    stop = StopSignal()
    stop.request("SIGTERM")
    time.sleep(0.05)
    stop.request("SIGINT")
    assert exits == [stop_module.EXIT_AT_ONCE]


def test_between_batches_waits_for_the_batch_in_flight() -> None:
    stop = StopSignal()
    order: list[str] = []
    with stop.between_batches():
        def stopper() -> None:
            with stop.between_batches():
                order.append("stop")

        t = threading.Thread(target=stopper)
        t.start()
        time.sleep(0.05)
        order.append("batch done")
    t.join(1)
    assert order == ["batch done", "stop"]


@pytest.mark.parametrize("text", [
    "ExitCodeException exitCode=143: chmod",
    'Cannot run program "chmod": error=0, Failed to exec spawn helper: pid: 31007, signal: 15',
])
def test_a_helper_killed_by_our_own_stop_signal_is_not_a_failure(text: str) -> None:
    from relay.stream.runner import _stop_killed_a_helper

    stop = StopSignal()
    assert not _stop_killed_a_helper(stop, RuntimeError(text)), "no stop requested: a failure"
    stop.request("SIGTERM")
    assert _stop_killed_a_helper(stop, RuntimeError(text))
    assert not _stop_killed_a_helper(stop, RuntimeError("Connection refused"))

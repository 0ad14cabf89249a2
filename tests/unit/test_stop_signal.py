from __future__ import annotations

import logging
import threading
import time

import pytest

from outbox_relay.stream import stop as stop_module
from outbox_relay.stream.stop import StopSignal


class _Clock:
    """A monotonic clock the test moves by hand: the echo window is about time between
    two signals, and real time on a loaded machine makes that window a race."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(stop_module, "time", fake)
    return fake


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(stop_module.os, "_exit", calls.append)
    return calls


def test_first_request_sets_the_flag_and_echoes_are_one_request(
    clock: _Clock, exits: list[int]
) -> None:
    stop = StopSignal()
    assert not stop.requested
    stop.request("SIGTERM")
    clock.now += stop_module._ECHO_WINDOW_S  # the edge of the window is still an echo
    stop.request("SIGTERM to the JVM")  # the same group signal, seen by the JVM too
    assert stop.requested and exits == []


def test_a_later_second_signal_exits_at_once(clock: _Clock, exits: list[int]) -> None:
    stop = StopSignal()
    stop.request("SIGTERM")
    clock.now += stop_module._ECHO_WINDOW_S + 0.001
    stop.request("SIGINT")
    assert exits == [stop_module.EXIT_AT_ONCE]


class _WatchedLock:
    """A lock that says when a thread has to wait for it, so the test knows the stopper
    is blocked behind the batch rather than merely slow to start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.contended = threading.Event()

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            self.contended.set()
            self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_between_batches_waits_for_the_batch_in_flight() -> None:
    stop = StopSignal()
    lock = _WatchedLock()
    stop._batch = lock  # type: ignore[assignment]
    order: list[str] = []

    def stopper() -> None:
        with stop.between_batches():
            order.append("stop")

    t = threading.Thread(target=stopper)
    with stop.between_batches():
        t.start()
        assert lock.contended.wait(60), "the stopper never had to wait for the batch"
        order.append("batch done")
    t.join(60)
    assert not t.is_alive() and order == ["batch done", "stop"]


def test_a_batch_body_never_waits_on_a_runner_that_is_stopping_the_query() -> None:
    """The runner holds between_batches() inside query.stop(), which waits for the stream
    thread; a body that Spark starts on that thread must give up at once, not wait."""
    stop = StopSignal()
    stop.request("SIGTERM")
    ran: list[bool] = []
    with stop.between_batches():  # the runner, stopping the query
        body = threading.Thread(target=lambda: ran.append(_enter(stop)))
        body.start()
        body.join(10)
        assert not body.is_alive(), "the body waited for the runner"
    assert ran == [False]


def test_a_batch_body_runs_when_no_stop_is_requested_and_takes_the_turn() -> None:
    stop = StopSignal()
    with stop.batch_body() as may_run:
        assert may_run
        assert not stop._batch.acquire(blocking=False), "the body holds the turn"
    assert stop._batch.acquire(blocking=False)


@pytest.mark.parametrize("how", ["request", "abort", "run_out", "a parent's request"])
def test_no_batch_body_logs_its_start_after_the_log_says_the_stop_came(
    how: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """A body that decides to run while the stop is being logged: it either logs its start
    before that line and runs, or it does not run. Seen in CI: a body read the flag still
    unset between the stop's log line and the flag, and a round started after the line."""
    parent = StopSignal()
    stop = parent.child() if how.startswith("a parent") else parent  # a database's relay
    decided: list[bool] = []
    body = threading.Thread(target=lambda: decided.append(_enter(stop, "body")))

    class StartBodyOnStopLine(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno == logging.WARNING and not body.is_alive() and not decided:
                body.start()
                body.join(0.3)  # a body that could decide now would be done well within

    handler = StartBodyOnStopLine()
    logging.getLogger("outbox_relay.stream.stop").addHandler(handler)
    caplog.set_level(logging.DEBUG, logger="outbox_relay.stream.stop")
    try:
        getattr(parent, how.removeprefix("a parent's "))("the test")
    finally:
        logging.getLogger("outbox_relay.stream.stop").removeHandler(handler)
    body.join(10)
    lines = [r.getMessage() for r in caplog.records]
    assert decided == [False] and not any("rounds start" in ln for ln in lines), lines


def _enter(stop: StopSignal, label: str = "batch body") -> bool:
    with stop.batch_body(label) as may_run:
        return may_run


@pytest.mark.parametrize("text", [
    "ExitCodeException exitCode=143: chmod",
    'Cannot run program "chmod": error=0, Failed to exec spawn helper: pid: 31007, signal: 15',
    # What the bench's start/stop met: the group's SIGTERM reached pyspark.daemon while the
    # query planned its first micro-batch (the source's worker).
    "[STREAM_FAILED] Query [id = 3dfa6268] terminated with exception: EOFException "
    "occurred while reading the port number from pyspark.daemon's stdout.",
    "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)",
    # A full bench run's start/stop: the SIGTERM reached the source's worker while the
    # query, still initializing, waited for its first reply (Utils.exceptionString).
    "org.apache.spark.sql.streaming.StreamingQueryException: [STREAM_FAILED] Query "
    "terminated with exception:  SQLSTATE: XXKST\n"
    "Caused by: java.io.EOFException\n"
    "\tat java.base/java.io.DataInputStream.readInt(DataInputStream.java:386)\n"
    "\tat org.apache.spark.sql.execution.python.streaming.PythonStreamingSourceRunner"
    ".init(PythonStreamingSourceRunner.scala:135)\n",
])
def test_a_helper_killed_by_our_own_stop_signal_is_not_a_failure(text: str) -> None:
    from outbox_relay.stream.watching import stop_killed_a_helper

    stop = StopSignal()
    assert not stop_killed_a_helper(stop, RuntimeError(text)), "no stop requested: a failure"
    stop.request("SIGTERM")
    assert stop_killed_a_helper(stop, RuntimeError(text))
    assert not stop_killed_a_helper(stop, RuntimeError("Connection refused"))


def test_install_outside_the_main_thread_warns_instead_of_failing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    errors: list[BaseException] = []

    def install() -> None:
        try:
            StopSignal().install()
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=install)
    worker.start()
    worker.join()
    assert errors == []
    assert "not the main thread" in caplog.text


def test_a_body_waiting_for_the_runners_rounds_is_seen_until_it_runs() -> None:
    stop = StopSignal()
    entered = threading.Event()
    leave = threading.Event()

    def body() -> None:
        with stop.batch_body() as may_run:
            assert may_run
            entered.set()
            assert leave.wait(10)

    with stop.batch_body():  # the runner's own rounds hold the turn
        assert not stop.body_waiting
        thread = threading.Thread(target=body)
        thread.start()
        deadline = time.monotonic() + 10
        while not stop.body_waiting and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stop.body_waiting, "a body waiting for its turn is seen"
        assert not entered.is_set()
    assert entered.wait(10)
    assert not stop.body_waiting, "a body that runs waits no more"
    leave.set()
    thread.join(10)
    assert not stop.body_waiting

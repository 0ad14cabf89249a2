"""Graceful stop: signal handlers only set a flag; the query stops between batches.

Calling query.stop() from a handler deadlocks py4j, and stop() cancels a running
batch, so the runner takes `between_batches()` (held by every batch body) first.
A second signal exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from outbox_relay.exit_codes import ExitCode

log = logging.getLogger(__name__)

EXIT_AT_ONCE = ExitCode.AT_ONCE
_ECHO_WINDOW_S = 1.0
# How often a batch body waiting for the runner's turn looks at the stop flag.
_BODY_POLL_S = 0.1


class StopSignal:
    def __init__(self) -> None:
        self._event = threading.Event()
        self._batch = threading.Lock()
        # Set while a batch body waits for the runner's rounds (outbox_relay.stream.starting).
        self._body_waiting = threading.Event()
        self._first: float | None = None
        self._count_lock = threading.Lock()
        # Orders setting the flag (and its log line) against a batch body's decision to
        # run (and its log line): no body logs its start after the log says the stop came.
        self._order = threading.Lock()
        self._budget_spent = False
        # A relay of several databases: one child a database, each stopped by this one's
        # request, budget or abort, and each aborted alone by its own database's failure.
        self._parent: StopSignal | None = None
        self._children: list[StopSignal] = []

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    @property
    def ran_out(self) -> bool:
        """Whether an available-now drain's time budget ended it, with no stop request
        (a signal) before or after: a drain cut short by its budget, not interrupted."""
        with self._count_lock:
            return self._budget_spent and self._first is None

    @property
    def interrupted(self) -> bool:
        """Whether the run was asked to stop, or aborted, before it was done: any stop
        but a spent budget's alone."""
        return self.requested and not self.ran_out

    def request(self, why: str) -> None:
        now = time.monotonic()
        with self._count_lock:
            # A signal to the process group reaches this Python and the JVM together:
            # copies arriving within the echo window are the same request.
            second = self._first is not None and now - self._first > _ECHO_WINDOW_S
            self._first = self._first if self._first is not None else now
        if second:
            log.error("second stop signal (%s): exiting at once", why)
            os._exit(EXIT_AT_ONCE)
        self._set("stop requested (%s): finishing the batch in flight", why, always=True)

    def abort(self, why: str) -> None:
        """After a failure that ends the run: every batch body and lane stops as for a stop
        request, but no signal was received, so a user's signal after this one is still a
        first one (a graceful stop, not an exit at once)."""
        self._set("stopping everything that runs: %s", why)

    def run_out(self, why: str) -> None:
        """The drain's time budget is spent (outbox_relay.stream.budget): every batch body
        and lane stops as for a stop request, but no signal was received, as with abort."""
        with self._count_lock:
            self._budget_spent = True
        self._set("%s: claiming nothing new, finishing the rounds in flight", why)

    def _set(self, line: str, why: str, always: bool = False) -> None:
        """Sets the flag, then its children's, then logs `line` (always, or only when the
        flag was not set yet), all under `_order`: a body of this stop or of a child that
        runs decided so before the flags were set, and logged its start before `line`."""
        with self._order:
            first = not self._event.is_set()
            self._event.set()
            self._tell_children()
            if always or first:
                log.warning(line, why)

    def child(self) -> StopSignal:
        """A stop of one part of the run (a database's relay): whatever stops this one
        stops it too, as that stop (a signal, a spent budget); its own abort stops it
        alone. Signals reach the root (`root`), never a child."""
        child = StopSignal()
        child._parent = self
        with self._count_lock:
            self._children.append(child)
        if self.requested:
            child._follow(self)
        return child

    @property
    def root(self) -> StopSignal:
        return self if self._parent is None else self._parent.root

    def _tell_children(self) -> None:
        with self._count_lock:
            children = list(self._children)
        for child in children:
            child._follow(self)

    def _follow(self, parent: StopSignal) -> None:
        with parent._count_lock:
            first, spent = parent._first, parent._budget_spent
        with self._count_lock:
            self._first = self._first if self._first is not None else first
            self._budget_spent = self._budget_spent or spent
        with self._order:
            self._event.set()
            self._tell_children()

    def install(self) -> None:
        assert self._parent is None, "signals reach the root"
        try:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
        except ValueError:
            # Not the main thread (a host that runs the file in a thread of its own): the
            # JVM's TERM and INT still arrive, through forward_jvm_signals.
            log.warning("not the main thread: stop signals reach the relay through the JVM")

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.request(signal.Signals(signum).name)

    @contextmanager
    def between_batches(self) -> Iterator[None]:
        with self._batch:
            yield

    @contextmanager
    def batch_body(self, label: str = "batch body") -> Iterator[bool]:
        """Held by a batch body; yields whether it may run (False once a stop is requested),
        and logs `label: rounds start` when it may.

        Never waits on the runner: once a stop is requested the runner holds
        between_batches() inside query.stop(), which waits for Spark's stream thread, the
        very thread that calls this body for the next micro-batch. Blocking here stalled
        every such stop for spark.sql.streaming.stopTimeout (60 s), seen on a standalone
        cluster where the next batch often reaches its body before the interrupt lands."""
        if not self._batch.acquire(blocking=False):
            self._body_waiting.set()
            try:
                while not self._batch.acquire(timeout=_BODY_POLL_S):
                    if self.requested:
                        yield False
                        return
            finally:
                self._body_waiting.clear()
        try:
            with self._order:
                may_run = not self.requested
                if may_run:
                    log.debug("%s: rounds start", label)
            yield may_run
        finally:
            self._batch.release()

    @property
    def body_waiting(self) -> bool:
        """Whether a batch body waits to run (for rounds run outside the query)."""
        return self._body_waiting.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


class JvmSignalForwarder:
    """Implements sun.misc.SignalHandler through py4j, so a TERM or INT that reaches the
    driver JVM (spark-submit's own process, or a process-group signal) stops the relay
    gracefully instead of running the JVM's shutdown hooks under a batch in flight."""

    def __init__(self, stop: StopSignal) -> None:
        self._stop = stop

    def handle(self, sig: Any) -> None:
        self._stop.request(f"SIG{sig.getName()} to the JVM")

    class Java:
        implements = ["sun.misc.SignalHandler"]


def forward_jvm_signals(spark: Any, stop: StopSignal) -> None:
    _forward(spark.sparkContext._gateway, spark.sparkContext._jvm, stop.root)


def forward_submitting_jvm_signals(stop: StopSignal) -> None:
    """Under spark-submit its JVM runs before this Python does, and a supervisor signals
    its pid: TERM and INT reaching it stop the relay from the first second on. Until
    this runs, that JVM's own handler ends spark-submit with 143."""
    from outbox_relay.launch.spark import under_spark_submit

    if not under_spark_submit():
        return
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    _forward(SparkContext._gateway, SparkContext._jvm, stop)


def _forward(gateway: Any, jvm: Any, stop: StopSignal) -> None:
    from pyspark.java_gateway import ensure_callback_server_started

    ensure_callback_server_started(gateway)
    forwarder = JvmSignalForwarder(stop)
    for name in ("TERM", "INT"):
        try:
            jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal(name), forwarder)
        except Exception as exc:  # the JVM may refuse a signal it reserves
            log.warning("cannot forward SIG%s from the JVM: %s", name, exc)

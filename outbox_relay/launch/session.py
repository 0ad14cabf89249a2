"""The run's SparkSession: given (a notebook's, the tests'), or built in a thread of its own
beside the relay's first rounds.

The driver's producer (outbox_relay.direct) delivers without Spark, so a relay's first
messages need not wait for the JVM, the session and the first plan (10-20 s on two
cores): the session is built beside the rounds, and a drain that the direct lane
finishes never asks for one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class SparkSource:
    def __init__(self, build: Callable[[], SparkSession] | None = None,
                 given: SparkSession | None = None) -> None:
        self._build = build
        self._session = given
        self._error: BaseException | None = None
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        if given is not None:
            self._done.set()

    @classmethod
    def of(cls, spark: SparkSession) -> SparkSource:
        return cls(given=spark)

    def begin(self) -> None:
        """Starts building the session, once; nothing when one was given."""
        with self._guard:
            if self._done.is_set() or self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="relay-spark-session",
                                            daemon=True)
            self._thread.start()
        log.debug("start-up: building the Spark session beside the first rounds")

    def _run(self) -> None:
        assert self._build is not None
        try:
            self._session = self._build()
            log.debug("start-up: the Spark session is ready")
        except BaseException as exc:  # handed to the runner's thread by result()
            self._error = exc
        finally:
            self._done.set()

    @property
    def begun(self) -> bool:
        with self._guard:
            return self._done.is_set() or self._thread is not None

    @property
    def ready(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout_s: float) -> bool:
        return self._done.wait(timeout_s)

    def result(self) -> SparkSession:
        """The session once built (begins the build if nobody did); raises its error."""
        self.begin()
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._session is not None
        return self._session

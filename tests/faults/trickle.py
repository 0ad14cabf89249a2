"""A steady trickle into the outbox, and the shipped profile for the scenarios that must
measure what a user runs (crash and restart, issue 52)."""

from __future__ import annotations

import random
import threading
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from outbox_relay.config import Config
from outbox_relay.config.load import build_config
from tests.faults.outbox_writer import Msg, Outbox, shaped
from tests.faults.relay_proc import REPO, _literal

SHIPPED_PROFILE = REPO / "conf" / "local.toml"


def shipped_config(url: str, bootstrap: str, workdir: Path, *, topics: Sequence[str],
                   source_name: str, **relay: Any) -> Config:
    """conf/local.toml with only this test's addresses, paths and topics (and its metrics
    endpoint off: several relays of the test share the machine); `relay` overrides go
    into its [relay] table, so a scenario says what it changes."""
    with SHIPPED_PROFILE.open("rb") as f:
        data: dict[str, Any] = tomllib.load(f)
    data["postgres"]["url"] = url
    data["kafka"]["bootstrap_servers"] = bootstrap
    data["ledger"]["path"] = str(workdir / "ledger")
    data["relay"].update(source_name=source_name, checkpoint_path=str(workdir / "checkpoint"),
                         include_topics=[_literal(t) for t in topics], **relay)
    data["metrics"]["enabled"] = False
    return build_config(data, env={})


class Trickle:
    """Writes `rate` messages a second, in transactions of `per_tx`, from a thread of its
    own until stopped, in every key shape (`shaped`: text, binary, empty and NULL keys,
    partition keys over other record keys). The Outbox remembers every message."""

    def __init__(self, outbox: Outbox, topics: Sequence[str], *, rate: float = 200.0,
                 per_tx: int = 10, keys: int = 30, value_bytes: int = 100,
                 seed: int = 52) -> None:
        self.outbox = outbox
        self.topics = list(topics)
        self.per_tx = per_tx
        self.keys = keys
        self.value_bytes = value_bytes
        self._period = per_tx / rate
        self._rng = random.Random(seed)
        self._done = threading.Event()
        self._n = 0
        self.error: BaseException | None = None
        # Held for each transaction, and by a pause: a paused trickle is between two.
        self._gate = threading.Lock()
        self._paused = False
        self._reschedule = False
        self._thread = threading.Thread(target=self._run, name="trickle", daemon=True)

    def __enter__(self) -> Trickle:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> int:
        """Stops writing; returns how many messages were written."""
        self._done.set()
        if self._paused:
            self.resume()
        self._thread.join(timeout=30)
        if self.error is not None:
            raise AssertionError(f"the trickle failed: {self.error!r}")
        return self._n

    def pause(self) -> None:
        """Waits for the transaction in progress to commit, then writes nothing until
        resume(): the test may write through the same Outbox meanwhile (a connection
        carries one transaction at a time), or take the database away."""
        self._gate.acquire()
        self._paused = True

    def resume(self) -> None:
        """Writes again, on the rate's schedule from now: a pause owes no traffic, where
        a slow commit does."""
        self._paused = False
        self._reschedule = True
        self._gate.release()

    def _batch(self) -> list[Msg]:
        out = []
        for _ in range(self.per_tx):
            head = f"t{self._n}:".encode()
            self._n += 1
            value = head + b"x" * max(0, self.value_bytes - len(head))
            topic = self.topics[self._rng.randrange(len(self.topics))]
            out.append(shaped(topic, f"key-{self._rng.randrange(self.keys)}", value, self._rng))
        return out

    def _run(self) -> None:
        due = time.monotonic()
        try:
            while not self._done.is_set():
                with self._gate:
                    if self._done.is_set():  # stopped while paused
                        break
                    if self._reschedule:
                        due, self._reschedule = time.monotonic(), False
                    self.outbox.write([self._batch()])
                due += self._period
                # Paced on a schedule, not by sleeps after each write: a slow commit is
                # caught up, so the rate holds on a loaded machine.
                self._done.wait(max(0.0, due - time.monotonic()))
        except BaseException as exc:  # reported by stop(), in the test's thread
            self.error = exc

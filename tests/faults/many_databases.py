"""What the fault tests of a relay of several databases share
(tests/faults/test_many_databases_faults.py): the databases and their trickles, a
second PostgreSQL server, the profile, the waits, and the judging of each database's
records against its own writer, with the commit-to-Kafka latencies read from Kafka's
append times."""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import outbox_relay.stack
from outbox_relay.config import Config
from outbox_relay.config.load import build_config
from tests.faults.infra import create_topics, outbox_count, scalar, unique, wait_until
from tests.faults.oracle import Record, Verdict, verdict
from tests.faults.outbox_writer import Msg, Outbox, traffic
from tests.faults.recorders import ownership, quiesce
from tests.faults.relay_proc import RelayProc, liveness_connected, relay_config
from tests.faults.trickle import Trickle
from tests.integration.many import by_database

SOURCE = "fault-many"
# The databases' names: the first two on the suite's server, the others on the second.
ON_STACK = ("stack-0", "stack-1")
ON_SECOND = ("second-0", "second-1")
OUTAGE_S = 15.0
# The steady window before the crash whose latencies the outage's are compared with.
BASELINE_S = 8.0
# Each database's trickle: 20 messages a second in transactions of 4, over 20 keys.
RATE, PER_TX, KEYS = 20.0, 4, 20
# Claims of at most this many rows a topic: a burst takes a database many rounds, so a
# fault finds rounds in flight and rows waiting.
BATCH = 100
# Rows an outbox may hold and still count as caught up with its trickle.
CAUGHT_UP = 100


class TimedOutbox(Outbox):
    """An Outbox that also notes when each message's transaction committed, in epoch
    seconds (the clock of Kafka's append times)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.committed_at: dict[int, float] = {}

    def write(self, transactions: Iterable[Sequence[Msg]]) -> list[int]:
        ids: list[int] = []
        for msgs in transactions:  # one by one: each transaction's own commit time
            got = super().write([msgs])
            now = time.time()
            self.committed_at.update(dict.fromkeys(got, now))
            ids += got
        return ids


@dataclass(frozen=True)
class SecondServer:
    """A PostgreSQL server of this module's own: the local stack's (outbox_relay.stack)
    in a directory of its own, without a broker, safe to crash."""

    dir: Path
    admin_url: str

    def crash(self) -> None:
        outbox_relay.stack.stop_postgres(self.dir, hard=True)  # immediate: like a crash

    def start(self) -> None:
        """Starts it unless it runs; waits until it answers."""
        url = outbox_relay.stack.start_postgres(self.dir)
        assert url == self.admin_url, "a restarted server keeps its port"


def topics(bootstrap: str) -> list[str]:
    """Two topics every database publishes to, stamped with Kafka's append time."""
    topics = [unique("many-fault") for _ in range(2)]
    create_topics(bootstrap, dict.fromkeys(topics, 3),
                  **{"message.timestamp.type": "LogAppendTime"})
    return topics


def config(urls: Mapping[str, str], bootstrap: str, workdir: Path,
            topics: Sequence[str]) -> Config:
    """The suite's relay profile (relay_config's short timeouts) with `[[databases]]`;
    its `[postgres]` URL is one of them, unused once databases are listed."""
    one = relay_config(next(iter(urls.values())), bootstrap, workdir, topics=topics,
                       source_name=SOURCE, relay={"batch_size": BATCH})
    data = one.model_dump(mode="json", exclude={"postgres": {"password"}})
    data["databases"] = [{"name": name, "url": url} for name, url in urls.items()]
    return build_config(data, env={})


@contextlib.contextmanager
def trickles(outboxes: Mapping[str, TimedOutbox],
              topics: Sequence[str]) -> Iterator[dict[str, Trickle]]:
    with contextlib.ExitStack() as running:
        yield {name: running.enter_context(Trickle(outbox, topics, rate=RATE, per_tx=PER_TX,
                                                   keys=KEYS, seed=50 + k))
               for k, (name, outbox) in enumerate(outboxes.items())}


@contextlib.contextmanager
def paused(writers: Iterable[Trickle]) -> Iterator[None]:
    """The trickles write nothing in the block: a writer's connection carries one
    transaction at a time, so the test writes through their outboxes meanwhile."""
    held = list(writers)
    for writer in held:
        writer.pause()
    try:
        yield
    finally:
        for writer in held:
            writer.resume()


def bursts(outboxes: Mapping[str, TimedOutbox], names: Iterable[str],
            topics: Sequence[str], n: int, seed: int) -> dict[str, int]:
    """`n` messages into each named database (whose trickle is paused), their
    transactions in turn, so that every burst ends at about the same time; returns the
    highest id written to each."""
    plans = {name: traffic(topics, n, per_tx=100, keys=KEYS, value_bytes=100,
                           seed=seed + k, tag="burst")
             for k, name in enumerate(names)}
    for txs in zip(*plans.values(), strict=True):
        for name, tx in zip(plans, txs, strict=True):
            outboxes[name].write([tx])
    return {name: max(outboxes[name].written) for name in plans}


def wait_steady(urls: Mapping[str, str], proc: RelayProc) -> float:
    """Waits until every database's relay runs (its liveness is held: a trickle starts
    no streaming query) and has caught up with the trickle; returns the seconds it
    took."""

    def steady() -> bool:
        assert proc.alive(), f"the relay exited\n{proc.tail()}"
        return all(liveness_connected(url) >= 1 and outbox_count(url) < CAUGHT_UP
                   for url in urls.values())

    return wait_until(steady, 300, "every database's relay to run", interval_s=0.5,
                      diagnose=proc.tail)


def delivered_up_to(url: str, last: int, proc: RelayProc) -> bool:
    assert proc.alive(), f"the relay exited\n{proc.tail()}"
    return not scalar(url, "SELECT count(*) FROM kafka_messages WHERE id <= %s", (last,))


def wait_delivered_up_to(urls: Mapping[str, str], last: Mapping[str, int],
                          proc: RelayProc) -> dict[str, float]:
    """Waits until each database holds no row up to `last[name]`; the seconds each took."""
    began = time.monotonic()
    took: dict[str, float] = {}
    for name, up_to in last.items():
        wait_until(functools.partial(delivered_up_to, urls[name], up_to, proc), 180,
                   f"database {name} to deliver up to id {up_to}", interval_s=0.2,
                   diagnose=proc.tail)
        took[name] = round(time.monotonic() - began, 1)
    return took


def empty(url: str) -> bool:
    return outbox_count(url) == 0


def finish(urls: Mapping[str, str], writers: Mapping[str, Trickle], proc: RelayProc) -> int:
    """Stops the trickles, waits until every outbox is empty and no relay works on it
    (a stop that lands on a checkpoint write is another scenario's fault, quiesce says),
    and stops the relay with SIGTERM; returns its exit code."""
    for writer in writers.values():
        writer.stop()
    for name, url in urls.items():
        wait_until(functools.partial(empty, url), 180, f"database {name} to drain",
                   diagnose=proc.tail)
    for url in urls.values():
        quiesce(url)
    return proc.stop()


def arrivals(records: Sequence[Record]) -> dict[int, float]:
    """Each id's first append to Kafka, in epoch seconds."""
    first: dict[int, float] = {}
    for r in records:
        assert r.timestamp_ms is not None, "the topics stamp records with their append time"
        first[r.outbox_id] = min(first.get(r.outbox_id, math.inf), r.timestamp_ms / 1000)
    return first


def p99(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[math.ceil(0.99 * len(ordered)) - 1], 2)


def latencies(outbox: TimedOutbox, arrived: Mapping[int, float], start: float,
               end: float) -> list[float]:
    """Commit to append in Kafka of the messages committed in [start, end)."""
    return [arrived[i] - t for i, t in outbox.committed_at.items()
            if start <= t < end and i in arrived]


def judge(outboxes: Mapping[str, TimedOutbox], records: Sequence[Record]
           ) -> tuple[dict[str, Verdict], dict[str, dict[int, float]]]:
    """Each database's verdict (tests/faults/oracle.py) and its ids' arrival times."""
    mine = by_database(records, SOURCE, (*ON_STACK, *ON_SECOND))
    verdicts = {name: verdict(outbox, mine.get(name, [])) for name, outbox in outboxes.items()}
    return verdicts, {name: arrivals(mine.get(name, [])) for name in outboxes}


def assert_fenced(urls: Mapping[str, str], config: Config) -> None:
    """Every claim and delete by the lock's holder, no lock taken from a live one."""
    for name, url in urls.items():
        owners = ownership(url, config.relay.lock_timeout_s)
        assert not owners.unfenced, (name, owners.unfenced[:5])
        assert not owners.stale_claims, (name, owners.stale_claims[:5])
        assert not owners.live_takeovers, (name, owners.live_takeovers[:5])


def after(times: Iterable[float], moment: float, last: bool = False) -> float | None:
    """Seconds from `moment` to the first (or last) of `times` at or after it."""
    later = [t for t in times if t >= moment]
    if not later:
        return None
    return round((max(later) if last else min(later)) - moment, 1)

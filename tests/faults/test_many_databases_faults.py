"""Scenarios 14 and 15: one relay for four outbox databases (docs/many-databases.md), two
on a PostgreSQL server of this module's own and two on the suite's, under a trickle into
all four in every key shape (`shaped`: NULL, equal and other partition keys, binary,
empty and NULL keys).

14: the second server crashes (immediate shutdown) and comes back 15 s later. Its two
databases' relays fail and are tried again with backoff; the other two relay on. The
time from a message's commit to its append in Kafka is measured for the other two
during the outage (and in a window before it), and the stopped databases' resume after
the restart.

15: the relay's process group is SIGKILLed while all four databases have work, and
started again at once.

Ids are only unique within a database, so the oracle keys every record by its database,
which its source header names (`<source_name>/<database>`), and judges each database
against its own writer: nothing lost, per-key order within the database, duplicates only
of what the relay had in flight at its fault. Kafka stamps each record with its append
time (LogAppendTime), on the machine's clock the writers note their commits with, so
the latencies are read back from what Kafka holds, not taken from the relay.
"""

from __future__ import annotations

import contextlib
import functools
import math
import signal
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import outbox_relay.stack
from outbox_relay.config import Config
from outbox_relay.config.load import build_config
from outbox_relay.stack import StackInfo
from tests.faults.conftest import Scenario
from tests.faults.infra import create_topics, outbox_count, scalar, session_ids, unique, wait_until
from tests.faults.oracle import Record, Verdict, read_all, totals, verdict
from tests.faults.outbox_writer import Msg, Outbox, traffic
from tests.faults.recorders import (
    create_database,
    drop_database,
    ownership,
    quiesce,
    unfinished_claims,
)
from tests.faults.relay_proc import RelayProc, relay_config, relays, sources_connected, start_relay
from tests.faults.trickle import Trickle
from tests.integration.many import by_database

pytestmark = [pytest.mark.faults, pytest.mark.integration]

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


@pytest.fixture(scope="module")
def second_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecondServer]:
    root = tmp_path_factory.mktemp("second-postgres")
    url = outbox_relay.stack.start_postgres(root)
    try:
        yield SecondServer(root, url)
    finally:
        with contextlib.suppress(Exception):
            outbox_relay.stack.stop_postgres(root)


@pytest.fixture
def databases(stack: StackInfo, second_server: SecondServer) -> Iterator[dict[str, str]]:
    """Four migrated databases with the recorders (tests/faults/recorders.py), by name."""
    second_server.start()  # a scenario before may have failed while it was down
    admin = dict.fromkeys(ON_STACK, stack.postgres_url)
    admin |= dict.fromkeys(ON_SECOND, second_server.admin_url)
    urls = {name: create_database(server) for name, server in admin.items()}
    yield urls
    with contextlib.suppress(Exception):
        second_server.start()
    for name, url in urls.items():
        drop_database(admin[name], url)


def _topics(bootstrap: str) -> list[str]:
    """Two topics every database publishes to, stamped with Kafka's append time."""
    topics = [unique("many-fault") for _ in range(2)]
    create_topics(bootstrap, dict.fromkeys(topics, 3),
                  **{"message.timestamp.type": "LogAppendTime"})
    return topics


def _config(urls: Mapping[str, str], bootstrap: str, workdir: Path,
            topics: Sequence[str]) -> Config:
    """The suite's relay profile (relay_config's short timeouts) with `[[databases]]`;
    its `[postgres]` URL is one of them, unused once databases are listed."""
    one = relay_config(next(iter(urls.values())), bootstrap, workdir, topics=topics,
                       source_name=SOURCE, relay={"batch_size": BATCH})
    data = one.model_dump(mode="json", exclude={"postgres": {"password"}})
    data["databases"] = [{"name": name, "url": url} for name, url in urls.items()]
    return build_config(data, env={})


@contextlib.contextmanager
def _trickles(outboxes: Mapping[str, TimedOutbox],
              topics: Sequence[str]) -> Iterator[dict[str, Trickle]]:
    with contextlib.ExitStack() as running:
        yield {name: running.enter_context(Trickle(outbox, topics, rate=RATE, per_tx=PER_TX,
                                                   keys=KEYS, seed=50 + k))
               for k, (name, outbox) in enumerate(outboxes.items())}


@contextlib.contextmanager
def _paused(writers: Iterable[Trickle]) -> Iterator[None]:
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


def _bursts(outboxes: Mapping[str, TimedOutbox], names: Iterable[str],
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


def _wait_steady(urls: Mapping[str, str], proc: RelayProc) -> float:
    """Waits until every database's streaming query polls it and its relay has caught up
    with the trickle; returns the seconds it took."""

    def steady() -> bool:
        assert proc.alive(), f"the relay exited\n{proc.tail()}"
        return all(sources_connected(url) >= 1 and outbox_count(url) < CAUGHT_UP
                   for url in urls.values())

    return wait_until(steady, 300, "every database's relay to run", interval_s=0.5,
                      diagnose=proc.tail)


def _delivered_up_to(url: str, last: int, proc: RelayProc) -> bool:
    assert proc.alive(), f"the relay exited\n{proc.tail()}"
    return not scalar(url, "SELECT count(*) FROM kafka_messages WHERE id <= %s", (last,))


def _wait_delivered_up_to(urls: Mapping[str, str], last: Mapping[str, int],
                          proc: RelayProc) -> dict[str, float]:
    """Waits until each database holds no row up to `last[name]`; the seconds each took."""
    began = time.monotonic()
    took: dict[str, float] = {}
    for name, up_to in last.items():
        wait_until(functools.partial(_delivered_up_to, urls[name], up_to, proc), 180,
                   f"database {name} to deliver up to id {up_to}", interval_s=0.2,
                   diagnose=proc.tail)
        took[name] = round(time.monotonic() - began, 1)
    return took


def _empty(url: str) -> bool:
    return outbox_count(url) == 0


def _finish(urls: Mapping[str, str], writers: Mapping[str, Trickle], proc: RelayProc) -> int:
    """Stops the trickles, waits until every outbox is empty and no relay works on it
    (a stop that lands on a checkpoint write is another scenario's fault, quiesce says),
    and stops the relay with SIGTERM; returns its exit code."""
    for writer in writers.values():
        writer.stop()
    for name, url in urls.items():
        wait_until(functools.partial(_empty, url), 180, f"database {name} to drain",
                   diagnose=proc.tail)
    for url in urls.values():
        quiesce(url)
    return proc.stop()


def _arrivals(records: Sequence[Record]) -> dict[int, float]:
    """Each id's first append to Kafka, in epoch seconds."""
    first: dict[int, float] = {}
    for r in records:
        assert r.timestamp_ms is not None, "the topics stamp records with their append time"
        first[r.outbox_id] = min(first.get(r.outbox_id, math.inf), r.timestamp_ms / 1000)
    return first


def _p99(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[math.ceil(0.99 * len(ordered)) - 1], 2)


def _latencies(outbox: TimedOutbox, arrived: Mapping[int, float], start: float,
               end: float) -> list[float]:
    """Commit to append in Kafka of the messages committed in [start, end)."""
    return [arrived[i] - t for i, t in outbox.committed_at.items()
            if start <= t < end and i in arrived]


def _judge(outboxes: Mapping[str, TimedOutbox], records: Sequence[Record]
           ) -> tuple[dict[str, Verdict], dict[str, dict[int, float]]]:
    """Each database's verdict (tests/faults/oracle.py) and its ids' arrival times."""
    mine = by_database(records, SOURCE, (*ON_STACK, *ON_SECOND))
    verdicts = {name: verdict(outbox, mine.get(name, [])) for name, outbox in outboxes.items()}
    return verdicts, {name: _arrivals(mine.get(name, [])) for name in outboxes}


def _assert_fenced(urls: Mapping[str, str], config: Config) -> None:
    """Every claim and delete by the lock's holder, no lock taken from a live one."""
    for name, url in urls.items():
        owners = ownership(url, config.relay.lock_timeout_s)
        assert not owners.unfenced, (name, owners.unfenced[:5])
        assert not owners.stale_claims, (name, owners.stale_claims[:5])
        assert not owners.live_takeovers, (name, owners.live_takeovers[:5])


@dataclass(frozen=True)
class Outage:
    stopped: float  # epoch seconds, just before the crash
    restarted: float  # once the server answered again
    last: dict[str, int]  # the highest id written to each stopped database before it


def _outage(server: SecondServer, outboxes: Mapping[str, TimedOutbox],
            writers: Mapping[str, Trickle], topics: Sequence[str], proc: RelayProc,
            outage_s: float, burst: int) -> Outage:
    """A burst into each database of the second server, so that the crash finds rounds
    in flight and rows waiting, then the crash, `outage_s` down, and the restart. Their
    trickles pause meanwhile: a commit the crash cuts leaves its writer unsure whether
    the rows exist, the application's question and not the relay's."""
    for name in ON_SECOND:
        writers[name].pause()
    last = _bursts(outboxes, ON_SECOND, topics, burst, seed=140)
    with contextlib.suppress(AssertionError):  # the crash comes anyway, then
        wait_until(lambda: any(session_ids(outboxes[n].url) for n in ON_SECOND), 10,
                   "a claim in flight on the second server", interval_s=0.01)
    stopped = time.time()
    server.crash()
    while time.time() < stopped + outage_s:
        assert proc.alive(), f"the relay exited during the outage\n{proc.tail()}"
        time.sleep(0.5)  # the outage's own length, not a wait for a condition
    server.start()
    restarted = time.time()
    for name in ON_SECOND:
        outboxes[name].close()  # its connection died with the server: a new one
        writers[name].resume()
    return Outage(stopped, restarted, last)


def _outage_figures(outboxes: Mapping[str, TimedOutbox],
                    arrivals: Mapping[str, dict[int, float]], o: Outage) -> dict[str, Any]:
    """The other databases' commit-to-Kafka latency during the outage and before it; the
    stopped ones' first delivery after the restart and the end of what waited for it."""
    during = {n: _latencies(outboxes[n], arrivals[n], o.stopped, o.restarted) for n in ON_STACK}
    before = {n: _latencies(outboxes[n], arrivals[n], o.stopped - BASELINE_S, o.stopped)
              for n in ON_STACK}
    in_time = {n: sum(1 for i, t in outboxes[n].committed_at.items()
                      if o.stopped <= t < o.restarted
                      and arrivals[n].get(i, math.inf) < o.restarted)
               for n in ON_STACK}
    resumed, waited, oldest, drained = {}, {}, {}, {}
    for n in ON_SECOND:
        resumed[n] = _after(arrivals[n].values(), o.restarted)
        # Committed before the crash, in Kafka only after the restart: what waited for it.
        held = sorted(i for i, t in outboxes[n].committed_at.items()
                      if t < o.stopped and arrivals[n].get(i, 0.0) >= o.restarted)
        waited[n] = len(held)
        oldest[n] = round(arrivals[n][held[0]] - o.restarted, 1) if held else None
        drained[n] = _after([arrivals[n][i] for i in held], o.restarted, last=True)
    return {
        "outage_p99_s": _p99([x for n in ON_STACK for x in during[n]]),
        "outage_p99_s_per_database": {n: _p99(during[n]) for n in ON_STACK},
        "outage_max_s": round(max((x for n in ON_STACK for x in during[n]), default=0.0), 2),
        "before_outage_p99_s": _p99([x for n in ON_STACK for x in before[n]]),
        "written_in_outage": {n: len(during[n]) for n in ON_STACK},
        "arrived_before_restart": in_time,
        "restart_to_first_delivery_s": resumed,
        "waited_for_the_restart": waited,
        "restart_to_oldest_delivered_s": max((x for x in oldest.values() if x is not None),
                                             default=None),
        "restart_to_all_waiting_delivered_s": drained,
    }


def _after(times: Iterable[float], moment: float, last: bool = False) -> float | None:
    """Seconds from `moment` to the first (or last) of `times` at or after it."""
    later = [t for t in times if t >= moment]
    if not later:
        return None
    return round((max(later) if last else min(later)) - moment, 1)


@pytest.mark.scenario("14-many-databases-server-crash")
def test_a_server_crash_stops_only_its_databases_which_resume_while_the_others_deliver(
    stack: StackInfo, second_server: SecondServer, databases: dict[str, str], tmp_path: Path,
    scenario: Scenario, long_mode: bool,
) -> None:
    outage_s, burst = (45.0, 4000) if long_mode else (OUTAGE_S, 1000)
    topics = _topics(stack.kafka_bootstrap)
    config = _config(databases, stack.kafka_bootstrap, tmp_path, topics)
    outboxes = {name: TimedOutbox(url) for name, url in databases.items()}
    with relays() as procs, _trickles(outboxes, topics) as writers:
        proc = start_relay(config, tmp_path, "relay")
        procs.append(proc)
        startup_s = _wait_steady(databases, proc)
        time.sleep(BASELINE_S)  # steady traffic, the outage's latencies' baseline
        try:
            o = _outage(second_server, outboxes, writers, topics, proc, outage_s, burst)
        finally:
            second_server.start()
        resume = _wait_delivered_up_to(databases, o.last, proc)
        code = _finish(databases, writers, proc)
        log = proc.tail()
    for outbox in outboxes.values():
        outbox.close()
    verdicts, arrivals = _judge(outboxes, read_all(stack.kafka_bootstrap, topics))
    may_repeat = {name: unfinished_claims(url) for name, url in databases.items()}
    figures = _outage_figures(outboxes, arrivals, o)
    scenario.update(
        totals(verdicts),
        faults_injected=1,
        outage_s=round(o.restarted - o.stopped, 1),
        startup_s=round(startup_s, 1),
        backoff_s=[config.relay.backoff_base_s, config.relay.backoff_max_s],
        restart_to_backlog_gone_s=resume,
        duplicated_per_database={n: v.duplicates for n, v in verdicts.items()},
        **figures,
        notes=f"4 databases (2 on a second PostgreSQL server) under a trickle of "
              f"{RATE:.0f} msg/s each; the second server crashed (immediate shutdown) for "
              f"{o.restarted - o.stopped:.0f} s after a burst of {burst} rows in each of "
              f"its databases. The other databases' commit-to-Kafka p99 during it: "
              f"{figures['outage_p99_s']} s (before it: {figures['before_outage_p99_s']} "
              f"s); the stopped ones delivered again "
              f"{figures['restart_to_first_delivery_s']} s after the restart",
    )
    print(f"startup_s={startup_s:.1f} resume={resume} figures={figures} "
          f"duplicates={ {n: v.duplicates for n, v in verdicts.items()} }")

    assert code == 0, log
    for name, v in verdicts.items():
        v.assert_clean(max_duplicates=None)
        assert v.duplicated_ids <= may_repeat[name], (name, "duplicates out of no session")
    # Nothing happened to the first server's databases: each message once.
    assert all(verdicts[n].duplicates == 0 for n in ON_STACK), \
        {n: verdicts[n].duplicates for n in ON_STACK}
    for name in ON_STACK:  # their relays went on during the outage
        assert figures["written_in_outage"][name] > 0, name
        assert figures["arrived_before_restart"][name] > 0, (name, figures)
    for name in ON_SECOND:  # and the stopped ones resumed
        assert figures["restart_to_first_delivery_s"][name] is not None, name
    _assert_fenced(databases, config)


@dataclass(frozen=True)
class Kill:
    in_flight: dict[str, set[int]]  # each database's claims the dead process left
    backlog: dict[str, int]  # the rows each database still held
    oldest: dict[str, int]  # the oldest of them


def _kill_in_flight(urls: Mapping[str, str], proc: RelayProc) -> Kill:
    """SIGKILLs the relay's group as soon as a claim of any database is in flight. The
    claims the dead process left are its messages in flight: the only ones it may have
    sent without deleting them."""
    wait_until(lambda: any(session_ids(url) for url in urls.values()), 120,
               "a claim in flight", interval_s=0.005, diagnose=proc.tail)
    code = proc.kill()
    assert code == -signal.SIGKILL, f"exit {code}\n{proc.tail()}"
    return Kill({name: session_ids(url) for name, url in urls.items()},
                {name: outbox_count(url) for name, url in urls.items()},
                {name: scalar(url, "SELECT coalesce(min(id), 0) FROM kafka_messages")
                 for name, url in urls.items()})


def _delivered_after(records: Sequence[Record], ids: Mapping[str, int],
                     moment: float) -> float | None:
    """Seconds from `moment` until each database's message of `ids` was in Kafka after
    it (a copy the dead process had sent before counts for nothing), the latest."""
    mine = by_database(records, SOURCE, (*ON_STACK, *ON_SECOND))
    times = [max(((r.timestamp_ms or 0) / 1000 for r in mine[name] if r.outbox_id == i),
                 default=0.0)
             for name, i in ids.items() if i]
    return _after(times, moment, last=True) if times and min(times) >= moment else None


@pytest.mark.scenario("15-many-databases-kill")
def test_a_relay_of_four_databases_killed_mid_run_and_restarted_loses_nothing_in_any(
    stack: StackInfo, databases: dict[str, str], tmp_path: Path, scenario: Scenario,
    long_mode: bool,
) -> None:
    burst = 10_000 if long_mode else 4000
    topics = _topics(stack.kafka_bootstrap)
    config = _config(databases, stack.kafka_bootstrap, tmp_path, topics)
    outboxes = {name: TimedOutbox(url) for name, url in databases.items()}
    with relays() as procs, _trickles(outboxes, topics) as writers:
        proc = start_relay(config, tmp_path, "relay-0")
        procs.append(proc)
        startup_s = _wait_steady(databases, proc)
        with _paused(writers.values()):
            last = _bursts(outboxes, databases, topics, burst, seed=150)
        kill = _kill_in_flight(databases, proc)
        restarted = time.time()
        proc = start_relay(config, tmp_path, "relay-1")
        procs.append(proc)
        resume = _wait_delivered_up_to(databases, last, proc)
        code = _finish(databases, writers, proc)
        log = proc.tail()
    for outbox in outboxes.values():
        outbox.close()
    records = read_all(stack.kafka_bootstrap, topics)
    verdicts, arrivals = _judge(outboxes, records)
    first_after = {n: _after(arrivals[n].values(), restarted) for n in databases}
    oldest_s = _delivered_after(records, kill.oldest, restarted)
    duplicated = {n: v.duplicates for n, v in verdicts.items()}
    flight = {n: len(ids) for n, ids in kill.in_flight.items()}
    scenario.update(
        totals(verdicts),
        faults_injected=1,
        startup_s=round(startup_s, 1),
        backlog_at_kill=kill.backlog,
        in_flight_at_kill=flight,
        duplicated_per_database=duplicated,
        restart_to_first_delivery_s=first_after,
        restart_to_oldest_delivered_s=oldest_s,
        restart_to_backlog_gone_s=resume,
        notes=f"SIGKILL of the group of a relay of 4 databases (2 servers) after a burst of "
              f"{burst} rows into each, under a trickle of {RATE:.0f} msg/s each; backlog "
              f"at the kill {list(kill.backlog.values())}, in flight {list(flight.values())},"
              f" duplicated {list(duplicated.values())}; restarted at once, the oldest "
              f"waiting message of every database delivered {oldest_s} s after the "
              f"restart, every backlog {max(resume.values())} s after it",
    )
    print(f"startup_s={startup_s:.1f} backlog={kill.backlog} in_flight={flight} "
          f"duplicates={duplicated} first_after={first_after} oldest_s={oldest_s} "
          f"resume={resume}")

    assert code == 0, log
    assert all(n > 0 for n in kill.backlog.values()), \
        f"a database had no work at the kill: {kill.backlog}"
    for name, v in verdicts.items():
        v.assert_clean(max_duplicates=None)
        assert v.duplicated_ids <= kill.in_flight[name], (
            name, sorted(v.duplicated_ids - kill.in_flight[name])[:10])
        assert max(v.copies.values(), default=1) <= 2, (name, "one kill, one copy more")
    _assert_fenced(databases, config)

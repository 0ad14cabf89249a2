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
import math
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import outbox_relay.stack
from outbox_relay.stack import StackInfo
from tests.faults import many_databases as many
from tests.faults.conftest import Scenario
from tests.faults.infra import outbox_count, scalar, session_ids, wait_until
from tests.faults.oracle import Record, read_all, totals
from tests.faults.recorders import create_database, drop_database, unfinished_claims
from tests.faults.relay_proc import RelayProc, relays, start_relay
from tests.faults.trickle import Trickle
from tests.integration.many import by_database

pytestmark = [pytest.mark.faults, pytest.mark.integration]


@pytest.fixture(scope="module")
def second_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[many.SecondServer]:
    root = tmp_path_factory.mktemp("second-postgres")
    url = outbox_relay.stack.start_postgres(root)
    try:
        yield many.SecondServer(root, url)
    finally:
        with contextlib.suppress(Exception):
            outbox_relay.stack.stop_postgres(root)


@pytest.fixture
def databases(stack: StackInfo, second_server: many.SecondServer) -> Iterator[dict[str, str]]:
    """Four migrated databases with the recorders (tests/faults/recorders.py), by name."""
    second_server.start()  # a scenario before may have failed while it was down
    admin = dict.fromkeys(many.ON_STACK, stack.postgres_url)
    admin |= dict.fromkeys(many.ON_SECOND, second_server.admin_url)
    urls = {name: create_database(server) for name, server in admin.items()}
    yield urls
    with contextlib.suppress(Exception):
        second_server.start()
    for name, url in urls.items():
        drop_database(admin[name], url)


@dataclass(frozen=True)
class Outage:
    stopped: float  # epoch seconds, just before the crash
    restarted: float  # once the server answered again
    last: dict[str, int]  # the highest id written to each stopped database before it


def _outage(server: many.SecondServer, outboxes: Mapping[str, many.TimedOutbox],
            writers: Mapping[str, Trickle], topics: Sequence[str], proc: RelayProc,
            outage_s: float, burst: int) -> Outage:
    """A burst into each database of the second server, so that the crash finds rounds
    in flight and rows waiting, then the crash, `outage_s` down, and the restart. Their
    trickles pause meanwhile: a commit the crash cuts leaves its writer unsure whether
    the rows exist, the application's question and not the relay's."""
    for name in many.ON_SECOND:
        writers[name].pause()
    last = many.bursts(outboxes, many.ON_SECOND, topics, burst, seed=140)
    with contextlib.suppress(AssertionError):  # the crash comes anyway, then
        wait_until(lambda: any(session_ids(outboxes[n].url) for n in many.ON_SECOND), 10,
                   "a claim in flight on the second server", interval_s=0.01)
    stopped = time.time()
    server.crash()
    while time.time() < stopped + outage_s:
        assert proc.alive(), f"the relay exited during the outage\n{proc.tail()}"
        time.sleep(0.5)  # the outage's own length, not a wait for a condition
    server.start()
    restarted = time.time()
    for name in many.ON_SECOND:
        outboxes[name].close()  # its connection died with the server: a new one
        writers[name].resume()
    return Outage(stopped, restarted, last)


def _outage_figures(outboxes: Mapping[str, many.TimedOutbox],
                    arrivals: Mapping[str, dict[int, float]], o: Outage) -> dict[str, Any]:
    """The other databases' commit-to-Kafka latency during the outage and before it; the
    stopped ones' first delivery after the restart and the end of what waited for it."""
    during = {n: many.latencies(outboxes[n], arrivals[n], o.stopped, o.restarted)
              for n in many.ON_STACK}
    before = {n: many.latencies(outboxes[n], arrivals[n], o.stopped - many.BASELINE_S, o.stopped)
              for n in many.ON_STACK}
    in_time = {n: sum(1 for i, t in outboxes[n].committed_at.items()
                      if o.stopped <= t < o.restarted
                      and arrivals[n].get(i, math.inf) < o.restarted)
               for n in many.ON_STACK}
    resumed, waited, oldest, drained = {}, {}, {}, {}
    for n in many.ON_SECOND:
        resumed[n] = many.after(arrivals[n].values(), o.restarted)
        # Committed before the crash, in Kafka only after the restart: what waited for it.
        held = sorted(i for i, t in outboxes[n].committed_at.items()
                      if t < o.stopped and arrivals[n].get(i, 0.0) >= o.restarted)
        waited[n] = len(held)
        oldest[n] = round(arrivals[n][held[0]] - o.restarted, 1) if held else None
        drained[n] = many.after([arrivals[n][i] for i in held], o.restarted, last=True)
    return {
        "outage_p99_s": many.p99([x for n in many.ON_STACK for x in during[n]]),
        "outage_p99_s_per_database": {n: many.p99(during[n]) for n in many.ON_STACK},
        "outage_max_s": round(max((x for n in many.ON_STACK for x in during[n]), default=0.0), 2),
        "before_outage_p99_s": many.p99([x for n in many.ON_STACK for x in before[n]]),
        "written_in_outage": {n: len(during[n]) for n in many.ON_STACK},
        "arrived_before_restart": in_time,
        "restart_to_first_delivery_s": resumed,
        "waited_for_the_restart": waited,
        "restart_to_oldest_delivered_s": max((x for x in oldest.values() if x is not None),
                                             default=None),
        "restart_to_all_waiting_delivered_s": drained,
    }


@pytest.mark.scenario("14-many-databases-server-crash")
def test_a_server_crash_stops_only_its_databases_which_resume_while_the_others_deliver(
    stack: StackInfo, second_server: many.SecondServer, databases: dict[str, str], tmp_path: Path,
    scenario: Scenario, long_mode: bool,
) -> None:
    outage_s, burst = (45.0, 4000) if long_mode else (many.OUTAGE_S, 1000)
    topics = many.topics(stack.kafka_bootstrap)
    config = many.config(databases, stack.kafka_bootstrap, tmp_path, topics)
    outboxes = {name: many.TimedOutbox(url) for name, url in databases.items()}
    with relays() as procs, many.trickles(outboxes, topics) as writers:
        proc = start_relay(config, tmp_path, "relay")
        procs.append(proc)
        startup_s = many.wait_steady(databases, proc)
        time.sleep(many.BASELINE_S)  # steady traffic, the outage's latencies' baseline
        try:
            o = _outage(second_server, outboxes, writers, topics, proc, outage_s, burst)
        finally:
            second_server.start()
        resume = many.wait_delivered_up_to(databases, o.last, proc)
        code = many.finish(databases, writers, proc)
        log = proc.tail()
    for outbox in outboxes.values():
        outbox.close()
    verdicts, arrivals = many.judge(outboxes, read_all(stack.kafka_bootstrap, topics))
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
              f"{many.RATE:.0f} msg/s each; the second server crashed (immediate shutdown) for "
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
    assert all(verdicts[n].duplicates == 0 for n in many.ON_STACK), \
        {n: verdicts[n].duplicates for n in many.ON_STACK}
    for name in many.ON_STACK:  # their relays went on during the outage
        assert figures["written_in_outage"][name] > 0, name
        assert figures["arrived_before_restart"][name] > 0, (name, figures)
    for name in many.ON_SECOND:  # and the stopped ones resumed
        assert figures["restart_to_first_delivery_s"][name] is not None, name
    many.assert_fenced(databases, config)


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
    mine = by_database(records, many.SOURCE, (*many.ON_STACK, *many.ON_SECOND))
    times = [max(((r.timestamp_ms or 0) / 1000 for r in mine[name] if r.outbox_id == i),
                 default=0.0)
             for name, i in ids.items() if i]
    return many.after(times, moment, last=True) if times and min(times) >= moment else None


@pytest.mark.scenario("15-many-databases-kill")
def test_a_relay_of_four_databases_killed_mid_run_and_restarted_loses_nothing_in_any(
    stack: StackInfo, databases: dict[str, str], tmp_path: Path, scenario: Scenario,
    long_mode: bool,
) -> None:
    burst = 10_000 if long_mode else 4000
    topics = many.topics(stack.kafka_bootstrap)
    config = many.config(databases, stack.kafka_bootstrap, tmp_path, topics)
    outboxes = {name: many.TimedOutbox(url) for name, url in databases.items()}
    with relays() as procs, many.trickles(outboxes, topics) as writers:
        proc = start_relay(config, tmp_path, "relay-0")
        procs.append(proc)
        startup_s = many.wait_steady(databases, proc)
        with many.paused(writers.values()):
            last = many.bursts(outboxes, databases, topics, burst, seed=150)
        kill = _kill_in_flight(databases, proc)
        restarted = time.time()
        proc = start_relay(config, tmp_path, "relay-1")
        procs.append(proc)
        resume = many.wait_delivered_up_to(databases, last, proc)
        code = many.finish(databases, writers, proc)
        log = proc.tail()
    for outbox in outboxes.values():
        outbox.close()
    records = read_all(stack.kafka_bootstrap, topics)
    verdicts, arrivals = many.judge(outboxes, records)
    first_after = {n: many.after(arrivals[n].values(), restarted) for n in databases}
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
              f"{burst} rows into each, under a trickle of {many.RATE:.0f} msg/s each; backlog "
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
    many.assert_fenced(databases, config)

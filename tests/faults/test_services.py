"""Scenarios 2 and 3: the broker, then the database, go away in the middle of a drain.

Both run on the suite's private stack, since they stop its services. The relay runs in
continuous mode, as in production, and must carry on (or fail clearly) by itself.
"""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from typing import Any

import psycopg2
import pytest

import outbox_relay.stack
from tests.faults.conftest import PrivateStack, Scenario
from tests.faults.infra import (
    create_topics,
    outbox_count,
    outbox_ids,
    query,
    session_ids,
    unique,
    wait_until,
)
from tests.faults.oracle import read_all, verdict
from tests.faults.outbox_writer import Outbox, traffic
from tests.faults.recorders import (
    create_database,
    drop_database,
    ownership,
    quiesce,
    unfinished_claims,
)
from tests.faults.relay_proc import relay_config, relays, start_relay
from tests.lanes import LANES, on_lane

pytestmark = [pytest.mark.faults, pytest.mark.integration]

OUTAGE_S = 30.0


def _errors(url: str) -> dict[str, str]:
    return {t: e or "" for t, e in query(url, "SELECT topic, last_error FROM kafka_topic_info "
                                         "WHERE error")}


@pytest.mark.scenario("2-broker-outage")
@pytest.mark.parametrize("lane", LANES)
def test_broker_outage_backs_off_deletes_nothing_unsent_and_drains_after_restart(
    private_stack: PrivateStack, tmp_path: Path, scenario: Scenario, long_mode: bool,
    lane: str,
) -> None:
    info = private_stack.ensure_up()
    url = create_database(info.postgres_url)
    n = 60_000 if long_mode else 12_000
    # One topic under the park policy: an outage is not poison and must park nothing.
    topics = [unique("fpark-outage"), *(unique("outage") for _ in range(3))]
    create_topics(info.kafka_bootstrap, dict.fromkeys(topics, 2))
    outbox = Outbox(url)
    outbox.write(traffic(topics, n, per_tx=50, keys=30, value_bytes=200, seed=2))
    config = on_lane(relay_config(
        url, info.kafka_bootstrap, tmp_path, topics=topics, source_name="fault-outage",
        relay={"batch_size": max(200, n // len(topics) // 10),
               "topic_rules": [{"match": "fpark-.*", "policy": "park"}]},
        kafka={"delivery_timeout_ms": 15_000, "request_timeout_ms": 5_000, "admin_timeout_s": 3},
    ), lane)
    watch: dict[str, Any] = {}
    with relays() as procs:
        proc = start_relay(config, tmp_path, "relay")
        procs.append(proc)
        started = time.monotonic()
        wait_until(lambda: outbox_count(url) < n, 600, "the drain to start", diagnose=proc.tail)
        before_stop = outbox_ids(url)
        # SIGTERM: the broker's controlled shutdown.
        outbox_relay.stack.stop_kafka(private_stack.dir)
        stopped = time.monotonic()
        at_stop = outbox_ids(url)
        in_flight = session_ids(url)
        errors: dict[str, str] = {}
        while time.monotonic() < stopped + OUTAGE_S:
            errors.update(_errors(url))
            assert proc.alive(), f"the relay exited during the outage\n{proc.tail()}"
            time.sleep(0.5)
        before_restart = outbox_ids(url)
        assert outbox_relay.stack.start_kafka(private_stack.dir) == info.kafka_bootstrap, \
            "the broker came back on other ports: the relay cannot follow it there"
        restarted = time.monotonic()
        wait_until(lambda: outbox_count(url) == 0, 900, "the drain to complete",
                   diagnose=proc.tail)
        drained = time.monotonic()
        quiesce(url)
        code = proc.stop()
        watch.update(log=proc.text())
    records = read_all(info.kafka_bootstrap, topics)
    v = verdict(outbox, records)
    may_repeat = unfinished_claims(url)
    parked = query(url, "SELECT count(*) FROM relay_parked_messages")[0][0]
    deleted_in_outage = (at_stop - before_restart)
    owners = ownership(url, config.relay.lock_timeout_s)
    scenario.update(
        v.figures(),
        faults_injected=1,
        outage_s=round(restarted - stopped, 1),
        drain_s=round(drained - started, 1),
        drain_after_restart_s=round(drained - restarted, 1),
        deleted_while_stopping=len(before_stop - at_stop),
        deleted_during_outage=len(deleted_in_outage),
        topics_in_backoff=len(errors),
        parked=parked,
        notes=f"broker stopped {restarted - stopped:.0f} s mid-drain; {len(errors)} of "
              f"{len(topics)} topics backed off; {len(deleted_in_outage)} rows deleted while "
              "it was down (all acknowledged before the stop); nothing parked",
    )
    drop_database(info.postgres_url, url)

    assert code == 0, watch["log"][-3000:]
    v.assert_clean(max_duplicates=None)
    assert v.duplicated_ids <= may_repeat, "duplicates only from sessions that did not finish"
    # Rows deleted while the broker was down can only be of sessions acknowledged before.
    assert deleted_in_outage <= in_flight, sorted(deleted_in_outage - in_flight)[:10]
    assert errors, "no topic backed off while the broker was down"
    assert all(re.search(r"(?i)kafka|broker|timed? ?out|disconnect", e) for e in errors.values()), \
        errors
    assert parked == 0, "an outage parked healthy rows"
    assert not owners.unfenced, owners.unfenced[:5]
    assert not owners.stale_claims, owners.stale_claims[:5]


@pytest.mark.scenario("3-database-restart")
def test_database_restart_mid_drain_reconnects_or_exits_clearly_and_completes(
    private_stack: PrivateStack, tmp_path: Path, scenario: Scenario, long_mode: bool,
) -> None:
    info = private_stack.ensure_up()
    url = create_database(info.postgres_url)
    n = 60_000 if long_mode else 12_000
    topics = [unique("pgdown") for _ in range(3)]
    create_topics(info.kafka_bootstrap, dict.fromkeys(topics, 2))
    outbox = Outbox(url)
    outbox.write(traffic(topics, n, per_tx=50, keys=30, value_bytes=200, seed=3))
    outbox.close()
    config = relay_config(url, info.kafka_bootstrap, tmp_path, topics=topics,
                          source_name="fault-pgdown",
                          relay={"batch_size": max(200, n // len(topics) // 10)})
    logs: list[str] = []
    with relays() as procs:
        proc = start_relay(config, tmp_path, "relay")
        procs.append(proc)
        started = time.monotonic()
        wait_until(lambda: outbox_count(url) < n, 600, "the drain to start", diagnose=proc.tail)
        # Wait for a session in flight, so the crash lands inside a batch.
        with contextlib.suppress(AssertionError):
            wait_until(lambda: bool(session_ids(url)), 60, "a session in flight")
        outbox_relay.stack.stop_postgres(private_stack.dir, hard=True)  # immediate: like a crash
        crashed = time.monotonic()
        down_for = 10.0
        while time.monotonic() < crashed + down_for:
            time.sleep(0.5)
        assert outbox_relay.stack.start_postgres(private_stack.dir) == info.postgres_url, \
            "PostgreSQL came back on another port: the relay cannot follow it there"
        restarted = time.monotonic()

        def settled() -> bool:
            return not proc.alive() or _quiet_count(url) == 0

        wait_until(settled, 900, "the relay to drain or to exit", diagnose=proc.tail)
        if proc.alive():
            outcome = "reconnected"
            final = proc
        else:
            code = proc.wait(10)
            logs.append(proc.text())
            message = _last_relay_line(proc.text())
            outcome = f"exited with code {code} ({message}); a restarted relay completed"
            assert code != 0, "an interrupted relay must not exit 0"
            assert re.search(r"(?i)postgres", message), f"unclear exit message: {message}"
            final = start_relay(config, tmp_path, "restarted")
            procs.append(final)
            wait_until(lambda: outbox_count(url) == 0, 900, "the restarted relay to drain",
                       diagnose=final.tail)
        drained = time.monotonic()
        quiesce(url)
        code = final.stop()
        logs.append(final.text())
    records = read_all(info.kafka_bootstrap, topics)
    v = verdict(outbox, records)
    may_repeat = unfinished_claims(url)
    owners = ownership(url, config.relay.lock_timeout_s)
    scenario.update(
        v.figures(),
        faults_injected=1,
        database_down_s=round(restarted - crashed, 1),
        drain_s=round(drained - started, 1),
        drain_after_restart_s=round(drained - restarted, 1),
        outcome=outcome,
        notes=f"PostgreSQL crashed (immediate shutdown) mid-batch for {restarted - crashed:.0f} s;"
              f" the relay {outcome}",
    )
    drop_database(info.postgres_url, url)

    assert code == 0, logs[-1][-3000:]
    v.assert_clean(max_duplicates=None)
    assert v.duplicated_ids <= may_repeat, "duplicates only from sessions that did not finish"
    # A read that lost the database is no message's fault: no writes to find one.
    bisected = [ln for log in logs for ln in log.splitlines() if "to find the failing" in ln]
    assert not bisected, bisected
    assert not owners.unfenced, owners.unfenced[:5]
    assert not owners.stale_claims, owners.stale_claims[:5]


def _quiet_count(url: str) -> int | None:
    """The outbox's size, or None while the database does not answer yet."""
    try:
        return outbox_count(url)
    except psycopg2.Error:
        return None


def _last_relay_line(log: str) -> str:
    lines = [ln for ln in log.splitlines()
             if ln.startswith("outbox-relay:") or " ERROR relay" in ln]
    return lines[-1].strip() if lines else "(no relay line)"

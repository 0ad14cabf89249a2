"""End to end on the real stack: what a consumer receives is what the outbox held."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.exit_codes import ExitCode
from outbox_relay.ledger.delta import Ledger
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    insert,
    query,
    unique,
    wait_for,
)

pytestmark = pytest.mark.integration


def test_every_message_delivered_in_key_order_and_outbox_emptied(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    spark: SparkSession,
) -> None:
    topics = {unique("orders"): 3, unique("users"): 2}
    create_topics(stack.kafka_bootstrap, topics)
    rng = random.Random(1)
    names = list(topics)
    transactions = [
        [Msg(names[rng.randrange(2)], f"k{rng.randrange(40)}".encode(), f"v{t}-{i}".encode())
         for i in range(rng.randrange(1, 12))]
        for t in range(300)
    ]
    ids = insert(migrated_url, transactions)
    config = make_config(list(topics), relay={"batch_size": 500, "read_partitions": 2})

    result = run_relay(config)

    assert result.exit_code == EXIT_OK
    got = consume(stack.kafka_bootstrap, names, expect=len(ids))
    assert sorted(r.outbox_id for r in got) == sorted(ids), "lost or duplicated"
    assert sum(result.stats.published.values()) == len(ids)
    # Per key, ids arrive in increasing order (each key maps to one partition).
    by_key: dict[tuple[str, bytes | None], list[tuple[int, int, int]]] = defaultdict(list)
    for r in got:
        by_key[(r.topic, r.key)].append((r.partition, r.offset, r.outbox_id))
    for key, seen in by_key.items():
        assert len({p for p, _, _ in seen}) == 1, f"key {key} spread over partitions"
        in_log_order = [i for _, _, i in sorted(seen)]
        assert in_log_order == sorted(in_log_order), f"key {key} out of order"
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0] == 0
    assert query(migrated_url, "SELECT count(*) FROM relay_sessions")[0][0] == 0
    # The ledger answers for every delivered message, exactly once each.
    ledger = Ledger(spark, config, Database(config.postgres))
    ledger.flush()
    rows = ledger.table().select("topic", "message_id", "outcome").collect()
    assert sorted(r.message_id for r in rows) == sorted(ids)
    assert {r.outcome for r in rows} == {"published"}
    sample = got[0]
    entries = ledger.lookup(sample.topic, sample.outbox_id)
    assert [(e.outcome, e.where) for e in entries] == [("published", "delta")]
    assert ledger.lookup(sample.topic, 10**12) == []


def test_headers_tombstones_and_partition_keys(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner
) -> None:
    topic = unique("hdr")
    create_topics(stack.kafka_bootstrap, {topic: 4})
    ids = insert(migrated_url, [[
        Msg(topic, b"k1", b"hello", headers={"trace-id": "t-1", "tenant": "ünï"}),
        Msg(topic, b"k1", None),
        Msg(topic, None, b"keyless"),
    ]])
    result = run_relay(make_config([topic], relay={"source_name": "hdr-source"}))
    assert result.exit_code == EXIT_OK
    got = sorted(consume(stack.kafka_bootstrap, [topic], expect=3), key=lambda r: r.outbox_id)
    assert [r.outbox_id for r in got] == ids
    first, tomb, keyless = got
    assert first.value == b"hello" and first.key == b"k1"
    assert first.headers["trace-id"] == b"t-1"
    assert first.headers["tenant"] == "ünï".encode()
    assert first.headers["outbox-relay.source"] == b"hds-source".replace(b"hds", b"hdr")
    created = first.headers["outbox-relay.created-at"].decode()
    assert created.endswith("Z") and created[:2] == "20"
    assert tomb.value is None and tomb.key == b"k1"
    assert keyless.key is None and keyless.value == b"keyless"


def test_missing_and_illegal_topics_error_while_others_flow_then_recover(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner
) -> None:
    good, missing = unique("good"), unique("missing")
    evil = "it's; DROP TABLE kafka_messages;--"
    create_topics(stack.kafka_bootstrap, {good: 1})
    insert(migrated_url, [[Msg(missing, b"k", b"m1")], [Msg(evil, b"k", b"e1")],
                          [Msg(good, b"k", b"g1")], [Msg(missing, b"k", b"m2")]])
    config = make_config([good, missing, evil.replace("'", "'")],
                         relay={"include_topics": [".*"], "available_now_deadline_s": 2})

    first = run_relay(config)

    assert first.exit_code != EXIT_OK
    assert {s.topic for s in first.left_over} == {missing, evil}
    assert len(consume(stack.kafka_bootstrap, [good], expect=1)) == 1
    info = dict((t, (err, retries, last)) for t, err, retries, last in query(
        migrated_url, "SELECT topic, error, retries, last_error FROM kafka_topic_info"))
    assert info[missing][0] is True and "does not exist" in info[missing][2]
    assert info[evil][0] is True and "illegal" in info[evil][2]
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages WHERE topic = %s",
                 (missing,))[0][0] == 2

    create_topics(stack.kafka_bootstrap, {missing: 1})
    second = run_relay(build_config(
        {**config.model_dump(mode="json", exclude={"postgres": {"password"}}),
         "relay": {**config.relay.model_dump(mode="json"), "exclude_topics": [".*DROP.*"],
                   "checkpoint_path": config.relay.checkpoint_path + "-2"}}, env={}))

    assert second.exit_code == EXIT_OK
    got = consume(stack.kafka_bootstrap, [missing], expect=2)
    assert [r.value for r in sorted(got, key=lambda r: r.outbox_id)] == [b"m1", b"m2"]
    row = query(migrated_url, "SELECT error, retries, last_error FROM kafka_topic_info "
                "WHERE topic = %s", (missing,))[0]
    assert row == (False, 0, None)


def test_compaction_sends_the_last_message_per_key_and_the_ledger_says_so(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    spark: SparkSession,
) -> None:
    compacted, plain = unique("prices"), unique("plain")
    create_topics(stack.kafka_bootstrap, {compacted: 1, plain: 1})
    rows = [[Msg(t, f"k{i % 3}".encode(), f"v{i}".encode()) for i in range(9)]
            for t in (compacted, plain)]
    ids = insert(migrated_url, rows)
    config = make_config([compacted, plain], relay={
        "topic_rules": [{"match": compacted, "compact": True}]})

    result = run_relay(config)

    assert result.exit_code == EXIT_OK
    assert result.stats.compacted[compacted] == 6 and result.stats.published[compacted] == 3
    got = consume(stack.kafka_bootstrap, [compacted, plain], expect=12)
    assert sorted(r.value for r in got if r.topic == compacted) == [b"v6", b"v7", b"v8"]
    assert len([r for r in got if r.topic == plain]) == 9
    ledger = Ledger(spark, config, Database(config.postgres))
    ledger.flush()
    outcomes = {(r.topic, r.message_id): r.outcome for r in ledger.table().collect()}
    assert sorted(outcomes) == sorted(
        [(compacted, i) for i in ids[:9]] + [(plain, i) for i in ids[9:]])
    assert [outcomes[(compacted, i)] for i in ids[:9]] == ["compacted"] * 6 + ["published"] * 3
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0] == 0


# The streaming source polls, and so does a continuous micro-batch body between rounds.
RELAY_POLL = """
SELECT query_start FROM pg_stat_activity
WHERE datname = current_database()
  AND application_name IN ('outbox-relay-source', 'outbox-relay') AND query LIKE %s
"""


def test_an_empty_outbox_runs_no_batch(
    migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner
) -> None:
    import threading

    from outbox_relay.control.pending import PENDING_TOPICS
    from outbox_relay.stream.stop import StopSignal

    # Stop once the relay has been seen polling the empty outbox several times: each
    # poll is a chance for a batch, whatever the machine's speed.
    polls_seen: set[object] = set()

    def polled() -> bool:
        polls_seen.update(t for (t,) in query(migrated_url, RELAY_POLL,
                                              ("%" + PENDING_TOPICS.strip()[:40] + "%",)))
        return len(polls_seen) >= 5

    stop = StopSignal()
    watcher = threading.Thread(
        target=lambda: (wait_for(polled, 600, interval_s=0.05), stop.request("test")),
        daemon=True,
    )
    watcher.start()
    result = run_relay(make_config([unique("idle")], relay={"poll_interval_s": 0.2}),
                       available_now=False, stop=stop)
    watcher.join(60)
    assert len(polls_seen) >= 5, f"the relay polled only {len(polls_seen)} times"
    assert result.exit_code == EXIT_OK and result.stats.batches == 0
    polls = query(migrated_url, "SELECT count(*) FROM kafka_topic_info")[0][0]
    assert polls == 0


def test_ledger_show_answers_from_the_command_line(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from outbox_relay.cli import main as cli
    from tests.integration.process import write_profile

    topic = unique("show")
    create_topics(stack.kafka_bootstrap, {topic: 1})
    (first, second) = insert(migrated_url, [[Msg(topic, b"k", b"one")], [Msg(topic, b"k", b"2")]])
    config = make_config([topic], relay={"source_name": "cli-src"})
    assert run_relay(config).exit_code == EXIT_OK
    profile = str(write_profile(config, tmp_path / "relay.toml"))
    capsys.readouterr()

    assert cli(["--config", profile, "ledger", "show", "--topic", topic, "--id", str(first)]) == 0
    staged = capsys.readouterr().out
    assert f"message {first} of topic '{topic}': published" in staged and "cli-src" in staged
    assert cli(["--config", profile, "ledger", "flush"]) == 0
    capsys.readouterr()
    assert cli(["--config", profile, "ledger", "show", "--topic", topic, "--id", str(second)]) == 0
    assert "(in the Delta ledger)" in capsys.readouterr().out
    assert cli(["--config", profile, "ledger", "show", "--topic", topic, "--id", "999999"]) \
        == ExitCode.NOT_FOUND
    assert "no record" in capsys.readouterr().out

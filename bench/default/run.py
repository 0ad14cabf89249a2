"""The default benchmark (`make bench`): the shipped profile under a user's conditions.

Everything here runs as the README runs it: the local stack that `make demo` starts
(its `postgres` database, with whatever history it holds), `spark-submit jobs/relay.py
--config conf/local.toml` with only the addresses set, nothing warmed, every topic new
to the relay. Rows are written by an application's ordinary transactions. Each figure
is read from Kafka by an independent consumer (tests/kafka_readback.py's reads are the
same: end offsets and records), never from the relay's own counts.

- W1: 10 topics of 3 partitions x 100,000 messages of 1 KB, 10,000 keys, two thirds with
  `partition_key` equal to the key; one connection, 500-row transactions, topics
  interleaved, into a table with a history (fill_w1), then VACUUM ANALYZE and a
  CHECKPOINT. The relay, then the peer (bench/peer.py), each on a fresh copy of the
  backlog. `drain_s`: first record in Kafka to the last; `exit_s`: launch to process
  exit (the final ledger copy included).
- LAT: 1,000 msg/s in 10-row transactions on a topic the relay never wrote to, from 15 s
  to 135 s after launch: the first minute (inserted 15-75 s after launch) and the
  steady state (75-135 s) apart. Then 500 msg/s the same way, for the CPU of the
  relay's processes (its driver JVM and Python, 35-130 s), and idle CPU after it.
- FIRST: launch to the first message delivered, with messages waiting on a new topic.

W3 and W5 run through the full suite's workloads (bench/workloads) on the same profile.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import REPO, log, sys_load
from bench.probes.quiet import settle

W1_TOPICS, W1_ROWS_PER_TOPIC, W1_KEYS, W1_PARTITIONS, W1_TX_ROWS = 10, 100_000, 10_000, 3, 500

FILL = """
INSERT INTO kafka_messages (topic, message, key, partition_key, created_at, updated_at)
SELECT (%(topics)s::varchar[])[1 + g %% %(ntopics)s],
       convert_to(rpad('{"n":' || g || ',"d":"', 998, md5(g::text)) || '"}', 'UTF8'),
       convert_to('k' || (g %% %(nkeys)s), 'UTF8'),
       CASE WHEN g %% 3 = 0 THEN NULL ELSE 'k' || (g %% %(nkeys)s) END, now(), now()
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g ORDER BY g
"""


@dataclass
class Stack:
    url: str
    bootstrap: str
    env: dict[str, str] = field(default_factory=dict)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def settled(self) -> dict[str, Any]:
        """Waits until the machine is settled (bench.probes.quiet.settle); what it found."""
        def vacuuming() -> bool:
            conn = psycopg2.connect(self.url)
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT count(*) FROM pg_stat_progress_vacuum")
                    return bool(cur.fetchone()[0])
            finally:
                conn.close()

        return {**settle(vacuuming), "load": sys_load()}

    def create_topics(self, topics: list[str], partitions: int) -> None:
        admin = self.admin()  # held until the futures resolve: its end cancels them
        futures = admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
        for f in futures.values():
            f.result()


def spark_submit(stack: Stack, *args: str, log_path: Path) -> subprocess.Popen[bytes]:
    """The relay as the README launches it: spark-submit, conf/local.toml."""
    submit = str(Path(sys.executable).parent / "spark-submit")
    out = log_path.open("wb")
    return subprocess.Popen([submit, "jobs/relay.py", "--config", "conf/local.toml", *args],
                            cwd=REPO, env=stack.env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def end_offsets(consumer: Consumer, topics: list[str]) -> int:
    """The sum of the end offsets of `topics`, by one consumer kept for the whole watch
    (a new one per sample cost the machine CPU beside the contenders)."""
    from confluent_kafka import TopicPartition

    meta = consumer.list_topics(timeout=10).topics
    return sum(consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
               for t in topics for p in meta[t].partitions)


def watch_delivery(stack: Stack, topics: list[str], expected: int, t0: float,
                   timeout_s: float) -> tuple[float | None, float | None]:
    """(first, last): seconds after t0 when Kafka first held a record of `topics`, and when
    it held `expected` records."""
    first = last = None
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": "bench-offsets"})
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            n = end_offsets(consumer, topics)
            now = time.time() - t0
            if n and first is None:
                first = now
            if n >= expected:
                last = now
                break
            time.sleep(0.1)
    finally:
        consumer.close()
    return first, last


def read_back(stack: Stack, topics: list[str], expected: int) -> dict[str, int]:
    """Counts, duplicates and per-key inversions of what Kafka holds, by the row number
    every W1 value starts with ({"n":<g>,...)."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"rb-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(topics)
    seen: set[int] = set()
    last: dict[tuple[str | None, bytes | None], int] = {}
    records = duplicates = inversions = 0
    idle_since = time.monotonic()
    while records < expected and time.monotonic() - idle_since < 30:
        batch = consumer.consume(10_000, 1.0)
        for m in batch:
            error = m.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(str(error))
            value = m.value() or b""
            n = int(value[5:value.index(b",")])
            records += 1
            duplicates += n in seen
            seen.add(n)
            key = (m.topic(), m.key())
            inversions += last.get(key, -1) > n
            last[key] = max(last.get(key, -1), n)
        if batch:
            idle_since = time.monotonic()
    consumer.close()
    return {"records": records, "distinct": len(seen), "duplicates": duplicates,
            "inversions": inversions}


def fill_w1(stack: Stack, label: str) -> list[str]:
    """W1's backlog, written as an outbox with a history receives one: the first half
    while the previous backlog (a topic no contender serves) still fills the table's
    front, the second half after that one was deleted and vacuumed, into the space it
    freed. So the ids do not follow the table's physical order (their correlation is
    about -0.5), as on a database that has held and deleted rows while it was written
    to; on a table written in id order, PostgreSQL plans the peer's select on the
    primary key and the peer's W1 takes three times as long (docs/performance.md)."""
    topics = [f"bench.{label}.t{i}" for i in range(W1_TOPICS)]
    stack.create_topics(topics, W1_PARTITIONS)
    total = W1_TOPICS * W1_ROWS_PER_TOPIC
    conn = psycopg2.connect(stack.url)
    try:
        with conn.cursor() as cur:
            def write(lo: int, hi: int, into: list[str]) -> None:
                for first in range(lo, hi, W1_TX_ROWS):
                    cur.execute(FILL, {"topics": into, "ntopics": len(into), "nkeys": W1_KEYS,
                                       "lo": first, "hi": first + W1_TX_ROWS - 1})
                    conn.commit()

            history = [f"bench.{label}.history"]
            write(0, total // 2, history)
            write(0, total // 2, topics)
            cur.execute("DELETE FROM kafka_messages WHERE topic = %s", history)
            conn.commit()
            conn.autocommit = True
            cur.execute("VACUUM kafka_messages")
            conn.autocommit = False
            write(total // 2, total, topics)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("VACUUM ANALYZE kafka_messages")
            # The fill dirtied about 1.5 GB: flushed now, not by the checkpointer beside
            # the contender's first rounds, as a backlog that built up over time is.
            cur.execute("CHECKPOINT")
    finally:
        conn.close()
    return topics


# The peer's select (bench/peer.py RETRIEVE), planned on the table as filled: on a table
# whose ids follow its physical order PostgreSQL walks the primary key with a filter on
# the topic, and the peer's W1 took 269.5 s instead of 87.7 s (docs/performance.md).
PEER_PLAN = ("EXPLAIN SELECT id, topic, message, key, partition_key, headers "
             "FROM kafka_messages WHERE topic = %s ORDER BY id LIMIT 1000")


def peer_plan(stack: Stack, topic: str) -> str:
    """The first line of the peer select's plan that names an index or a scan."""
    conn = psycopg2.connect(stack.url)
    try:
        with conn.cursor() as cur:
            cur.execute(PEER_PLAN, (topic,))
            lines = [r[0].strip(" ->") for r in cur.fetchall()]
    finally:
        conn.close()
    return next((line for line in lines if "Scan" in line), lines[0] if lines else "")


def w1(stack: Stack, work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    expected = W1_TOPICS * W1_ROWS_PER_TOPIC
    for name, command in (("relay", None), ("peer", "peer")):
        topics = fill_w1(stack, f"w1-{name}-{uuid.uuid4().hex[:6]}")
        plan = peer_plan(stack, topics[0])
        load = stack.settled()
        t0 = time.time()
        if command is None:
            proc = spark_submit(stack, "--available-now", log_path=work / "w1-relay.log")
        else:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.peer", "--url", stack.url, "--bootstrap",
                 stack.bootstrap, "--drain", "--stats", str(work / "w1-peer.json")],
                cwd=REPO, env=stack.env, start_new_session=True)
        first, last = watch_delivery(stack, topics, expected, t0, 900)
        code = proc.wait(900)
        exit_s = time.time() - t0
        check = read_back(stack, topics, expected)
        drain = (last - first) if first is not None and last is not None else None
        out[name] = {"drain_s": round(drain, 1) if drain else None,
                     "first_record_s": round(first, 1) if first else None,
                     "exit_s": round(exit_s, 1), "exit_code": code, "load_before": load,
                     "peer_select_plan": plan,
                     **check}
        log(f"W1 {name}: {out[name]}")
    relay, peer = out["relay"], out["peer"]
    if relay["drain_s"] and peer["drain_s"]:
        out["drain_ratio"] = round(peer["drain_s"] / relay["drain_s"], 2)
        out["exit_ratio"] = round(peer["exit_s"] / relay["exit_s"], 2)
    return out


def first_message(stack: Stack, work: Path) -> dict[str, Any]:
    """Launch to the first message delivered, 100 messages waiting on a new topic."""
    topic = f"bench.first-{uuid.uuid4().hex[:6]}"
    stack.create_topics([topic], 3)
    conn = psycopg2.connect(stack.url)
    with conn, conn.cursor() as cur:
        psycopg2.extras.execute_values(
            cur, "INSERT INTO kafka_messages (topic, key, message) VALUES %s",
            [(topic, f"k{i}".encode(), b"{}") for i in range(100)])
    conn.close()
    load = stack.settled()
    t0 = time.time()
    proc = spark_submit(stack, "--available-now", log_path=work / "first.log")
    first, _ = watch_delivery(stack, [topic], 1, t0, 120)
    proc.wait(120)
    result = {"launch_to_first_s": round(first, 2) if first else None, "load_before": load}
    log(f"FIRST: {result}")
    return result

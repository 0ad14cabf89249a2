"""The machine's limits on a workload's backlog (bench/probes/limits.py, bench/probes/javaperf.py):
PostgreSQL alone, Kafka alone (confluent-kafka, and Kafka's own Java tool: the higher is
the Kafka limit), and the pipeline of both. Measured once per run: they are ceilings,
not contenders, and the time plan keeps the repetitions for the contenders."""

from __future__ import annotations

import contextlib
import json
import traceback
from collections.abc import Iterator

from bench.backlog import Backlog, load
from bench.common import (
    KAFKA_LIMIT,
    KAFKA_LIMIT_JAVA,
    PG_LIMIT,
    PIPELINE_LIMIT,
    REPO,
    SHAPE_LIMIT,
    Outcome,
    log,
)
from bench.context import Bench
from bench.probes import limits
from bench.probes.javaperf import java_limit
from bench.relay_proc import launch
from outbox_relay.config import Config

KAFKA_LIMIT_CONFLUENT = "Kafka limit, confluent-kafka"
JAVA_TOOL_TOPICS_MAX = 20


def limit_outcomes(bench: Bench, label: str, backlog: Backlog, partitions: int,
                   workload: str) -> list[Outcome]:
    env = bench.env
    url = env.fresh_database(f"{label}-pg")
    load(url, backlog)
    pg = limits.postgres_limit(url)
    env.drop_database(url)
    out = [Outcome(PG_LIMIT, pg.rows, pg.seconds, {
        "read_s": round(pg.read_s, 2), "delete_s": round(pg.delete_s, 2),
        "bytes_read": pg.bytes_read,
    })]
    config = bench.config(workload, "postgresql://unused@127.0.0.1/x", f"{label}-kafka")
    out += _kafka(bench, label, backlog, partitions, config)
    out.append(_pipeline(bench, label, backlog, partitions, config))
    try:
        out.append(_shape(bench, label, backlog, partitions, workload))
    except Exception:  # a ceiling less; the report shows the others
        log(f"the shape limit failed:\n{traceback.format_exc()}")
    return out


def _kafka(bench: Bench, label: str, backlog: Backlog, partitions: int,
           config: Config) -> list[Outcome]:
    env = bench.env
    topics = env.topic_names(f"{label}-kafka", len(backlog.topics))
    repeats = 2
    every = topics + [f"{t}.r{i}" for i in range(1, repeats) for t in topics]
    env.create_topics(every, partitions)
    kafka_backlog = Backlog(backlog.rows, tuple(topics), backlog.keys, backlog.payload_bytes)
    kafka = limits.kafka_limit(env.stack.kafka_bootstrap, kafka_backlog, config.kafka, repeats)
    records = env.end_offsets(topics, partitions)
    env.delete_topics(every)
    confluent = Outcome(KAFKA_LIMIT_CONFLUENT, kafka.rows, kafka.seconds,
                        {"kafka_records": records, "best_of": repeats})
    out = [confluent]
    if len(backlog.topics) > JAVA_TOOL_TOPICS_MAX:
        # The tool sends to one topic per run, and a run is a JVM start: W3's 1,000 topics
        # took over 10 minutes of start-ups to send 100 records each.
        log(f"Java ProducerPerformance skipped: {len(backlog.topics)} topics, one JVM each")
        return _higher(out, confluent)
    java_topics = env.topic_names(f"{label}-java", len(backlog.topics))
    env.create_topics(java_topics, partitions)
    try:
        java = java_limit(env.stack.kafka_bootstrap, kafka_backlog, java_topics, config.kafka,
                          env.run_dir(f"{label}-java"))
        out.append(Outcome(KAFKA_LIMIT_JAVA, java.rows, java.seconds, {
            "kafka_records": env.end_offsets(java_topics, partitions),
            "per_topic_s": [round(s, 2) for s in java.per_topic],
            "note": "no keys, no headers: the tool sends payloads only",
        }))
    except Exception:  # the confluent figure still stands; the report says it is alone
        log(f"Java ProducerPerformance failed:\n{traceback.format_exc()}")
    finally:
        env.delete_topics(java_topics)
    return _higher(out, confluent)


def _higher(out: list[Outcome], confluent: Outcome) -> list[Outcome]:
    best = max(out, key=lambda o: o.msgs_per_s)
    return [*out, Outcome(KAFKA_LIMIT, best.rows, best.seconds, {
        "higher_of": best.contender,
        "confluent_msgs_per_s": round(confluent.msgs_per_s, 1),
        "java_msgs_per_s": round(out[1].msgs_per_s, 1) if len(out) > 1 else None,
    })]


@contextlib.contextmanager
def _own_backlog(bench: Bench, label: str, backlog: Backlog,
                 partitions: int) -> Iterator[tuple[str, list[str]]]:
    """A fresh database holding the backlog, written for fresh topics; both go after."""
    env = bench.env
    url = env.fresh_database(label)
    topics = env.topic_names(label, len(backlog.topics))
    env.create_topics(topics, partitions)
    try:
        load(url, Backlog(backlog.rows, tuple(topics), backlog.keys, backlog.payload_bytes))
        yield url, topics
    finally:
        env.drop_database(url)
        env.delete_topics(topics)


def _pipeline(bench: Bench, label: str, backlog: Backlog, partitions: int,
              config: Config) -> Outcome:
    with _own_backlog(bench, f"{label}-pipe", backlog, partitions) as (url, topics):
        pipe = limits.pipeline_limit(url, bench.env.stack.kafka_bootstrap, config.kafka)
        records = bench.env.end_offsets(topics, partitions)
    return Outcome(PIPELINE_LIMIT, pipe.rows, pipe.seconds, {
        "copy_and_produce_s": round(pipe.copy_and_produce_s, 2),
        "flush_s": round(pipe.flush_s, 2), "delete_s": round(pipe.delete_s, 2),
        "kafka_records": records,
    })


def _shape(bench: Bench, label: str, backlog: Backlog, partitions: int,
           workload: str) -> Outcome:
    """bench/probes/shape.py under spark-submit, with the workload's relay profile."""
    name = f"{label}-shape"
    with _own_backlog(bench, name, backlog, partitions) as (url, topics):
        proc = launch(bench.config(workload, url, name), bench.env.run_dir(name),
                      script=REPO / "bench" / "probes" / "shape.py")
        if proc.wait(timeout_s=3600) != 0:
            raise RuntimeError(f"bench/probes/shape.py failed: see {proc.log.name} in its run "
                               "folder")
        records = bench.env.end_offsets(topics, partitions)
    line = [ln for ln in proc.log.read_text().splitlines() if ln.startswith("{")][-1]
    got = json.loads(line)
    return Outcome(SHAPE_LIMIT, got["rows"], got["cold_s"], {
        "cold_s": round(got["cold_s"], 2), "warm_s": round(got["warm_s"], 2),
        "warm_msgs_per_s": round(got["rows"] / got["warm_s"], 1),
        "session_s": round(got["session_s"], 2), "kafka_records": records,
    })

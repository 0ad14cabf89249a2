"""Kafka's own Java producer performance tool as a Kafka limit (issue 10).

``org.apache.kafka.tools.ProducerPerformance`` from the ``kafka-tools`` jars of the
broker's own version, resolved once from Maven Central as the broker's jars are
(outbox_relay.stack.jars). Set up as the relay is: the backlog's payloads (``--payload-file``),
acks=all, idempotence, the profile's codec, linger and batch size. The tool takes one
topic a run, so it runs once per topic, one after the other, with that topic's share
of the rows; its own records/s exclude the JVM's start, and the limit is the rows over
the sum of the send times. It sends no keys and no headers (cheaper than the relay's
records), so it is a generous limit.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.backlog import Backlog, payload_pool
from outbox_relay.config import KafkaConfig
from outbox_relay.launch import ivy, packages
from outbox_relay.stack.jars import kafka_jars_dir

TOOLS = f"org.apache.kafka:kafka-tools:{packages.KAFKA_BROKER_VERSION}"
MAIN = "org.apache.kafka.tools.ProducerPerformance"
# "100000 records sent, 61050.1 records/sec (58.50 MB/sec), ..." (its last line)
_RESULT = re.compile(r"(\d+) records sent, ([\d.]+) records/sec")


@dataclass(frozen=True)
class JavaLimit:
    rows: int
    seconds: float
    per_topic: list[float]


def producer_props(bootstrap: str, kafka: KafkaConfig) -> list[str]:
    return [
        f"bootstrap.servers={bootstrap}", "acks=all", "enable.idempotence=true",
        "max.in.flight.requests.per.connection=5", f"linger.ms={kafka.linger_ms}",
        f"batch.size={kafka.batch_size}", f"compression.type={kafka.compression_type}",
        f"max.request.size={kafka.max_request_size}", "buffer.memory=268435456",
    ]


def parse_rate(output: str) -> tuple[int, float]:
    """(records, records per second) of the tool's final summary line."""
    found = _RESULT.findall(output)
    if not found:
        raise RuntimeError(f"no ProducerPerformance summary in: {output[-300:]}")
    records, rate = found[-1]
    return int(records), float(rate)


def java_limit(bootstrap: str, backlog: Backlog, topics: list[str], kafka: KafkaConfig,
               work: Path) -> JavaLimit:
    jars = kafka_jars_dir(TOOLS)
    payloads = work / "payloads.txt"
    payloads.write_bytes(b"\n".join(payload_pool(length=backlog.payload_bytes)))
    per_topic = backlog.rows // len(topics)
    seconds: list[float] = []
    for topic in topics:
        cmd = [ivy.java_executable(), "-Xmx512m", "-cp", f"{jars}/*", MAIN,
               "--topic", topic, "--num-records", str(per_topic), "--throughput", "-1",
               "--payload-file", str(payloads), "--producer-props",
               *producer_props(bootstrap, kafka)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"ProducerPerformance failed: {done.stderr[-500:]}")
        records, rate = parse_rate(done.stdout)
        seconds.append(records / rate)
    return JavaLimit(rows=per_topic * len(topics), seconds=sum(seconds), per_topic=seconds)

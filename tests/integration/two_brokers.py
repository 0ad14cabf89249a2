"""A private two-broker Kafka cluster, for tests where one partition of a topic fails while
another is acknowledged in the same write.

Node 1 is a combined broker and controller, started like the shared stack's broker
(outbox_relay.stack.kafka); node 2 is a broker only, formatted with node 1's cluster id. A topic
whose partitions are assigned to both (replication factor 1) loses the partitions of
node 2, and only those, while node 2 is stopped. One cluster per test session.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from outbox_relay.stack import kafka
from outbox_relay.stack.jars import kafka_jars_dir
from outbox_relay.stack.paths import StackPaths
from outbox_relay.stack.proc import HOST, failure, pick_free_ports, process_matches, wait_for

_START_TIMEOUT_S = 180.0
BROKER_ONLY = 2


def _broker_only(port: int, controller_port: int) -> dict[str, str]:
    """What turns the stack's combined node into a broker of node 1's quorum."""
    return {
        "process.roles": "broker",
        "node.id": str(BROKER_ONLY),
        "controller.quorum.bootstrap.servers": f"{HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
    }


def _cluster_id(paths: StackPaths) -> str:
    for line in (paths.kafka_data / "meta.properties").read_text().splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "cluster.id":
            return value.strip()
    raise AssertionError(f"no cluster.id in {paths.kafka_data}")


def _format_broker(paths: StackPaths, port: int, controller_port: int, cluster: str) -> None:
    """Formats node 2's log dir into node 1's cluster: kafka.start formats only a lone
    node (a new cluster id, --standalone), and skips a dir formatted already."""
    props = {**kafka.server_properties(port, controller_port, paths.kafka_data),
             **_broker_only(port, controller_port)}
    paths.kafka_root.mkdir(parents=True, exist_ok=True)
    paths.kafka_properties.write_text(kafka.render_properties(props))
    paths.kafka_log4j.write_text(kafka.render_log4j2(paths.kafka_log))
    argv = kafka.java_command(paths, kafka_jars_dir(), kafka.TOOL_HEAP,
                              "kafka.tools.StorageTool", "format", "-t", cluster,
                              "-c", str(paths.kafka_properties))
    with paths.kafka_console.open("a") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=120,
                              check=False)
    if done.returncode != 0:
        raise failure("Kafka", "formatting node 2 failed", paths.kafka_console)


@dataclass
class TwoBrokers:
    bootstrap: str  # node 1's listener: it stays up
    controller_port: int
    paths: StackPaths  # node 2's
    port: int  # node 2's
    pid: int | None = None  # node 2's, while it runs

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, topic: str, leaders: list[int], **config: str) -> None:
        """One partition per entry of `leaders`, on that node alone."""
        new = NewTopic(topic, num_partitions=len(leaders), replication_factor=-1,
                       replica_assignment=[[n] for n in leaders], config=dict(config))
        admin = self.admin()  # must outlive the future
        admin.create_topics([new])[topic].result()
        self.wait_led(topic, len(leaders))

    def stop_node2(self) -> None:
        kafka.stop(self.paths, self.pid)
        self.pid = None

    def start_node2(self) -> None:
        """Starts node 2 unless it runs, and waits until it is a live broker again."""
        if process_matches(self.pid, str(self.paths.kafka_properties)):
            return
        self.pid = kafka.start(self.paths, self.port, self.controller_port,
                               _broker_only(self.port, self.controller_port))
        if not wait_for(lambda: BROKER_ONLY in self._brokers(), _START_TIMEOUT_S, 0.25):
            raise failure("Kafka", "node 2 did not join", self.paths.kafka_console,
                          self.paths.kafka_log)

    def wait_led(self, topic: str, partitions: int) -> None:
        """Until every partition of `topic` has a leader (node 2's after its restart)."""
        if not wait_for(lambda: self._led(topic, partitions), 60.0, 0.2):
            raise AssertionError(f"partitions of {topic} without a leader")

    def _brokers(self) -> set[int]:
        try:
            return set(self.admin().list_topics(timeout=3).brokers)
        except KafkaException:
            return set()

    def _led(self, topic: str, partitions: int) -> bool:
        try:
            meta = self.admin().list_topics(topic, timeout=3).topics.get(topic)
        except KafkaException:
            return False
        return (meta is not None and len(meta.partitions) == partitions
                and all(p.leader >= 0 for p in meta.partitions.values()))


@pytest.fixture(scope="session", name="two_brokers")
def two_brokers_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoBrokers]:
    root = tmp_path_factory.mktemp("two-brokers")
    first, second = StackPaths.resolve(root / "node1"), StackPaths.resolve(root / "node2")
    port, controller, port2 = pick_free_ports(3)
    pid = kafka.start(first, port, controller)
    cluster = TwoBrokers(kafka.bootstrap_servers(port), controller, second, port2)
    try:
        kafka.wait_ready(first, port, pid, _START_TIMEOUT_S)
        _format_broker(second, port2, controller, _cluster_id(first))
        cluster.start_node2()
        yield cluster
    finally:
        cluster.stop_node2()
        kafka.stop(first, pid)


@pytest.fixture(name="cluster")
def cluster_fixture(two_brokers: TwoBrokers) -> TwoBrokers:
    """The session's cluster, with node 2 running (a test before may have stopped it)."""
    two_brokers.start_node2()
    return two_brokers

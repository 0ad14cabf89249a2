"""A real single-node Apache Kafka 4.x broker (combined KRaft broker + controller)."""

from __future__ import annotations

import base64
import logging
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from outbox_relay.launch.ivy import java_executable
from outbox_relay.stack.jars import kafka_jars_dir
from outbox_relay.stack.paths import StackPaths
from outbox_relay.stack.proc import (
    HOST,
    failure,
    process_gone,
    process_matches,
    spawn_detached,
    terminate,
    wait_for,
)

SERVICE = "Kafka"
NODE_ID = 1
BROKER_HEAP = ("-Xms256m", "-Xmx768m")
TOOL_HEAP = ("-Xmx256m",)
_JVM_FLAGS = (
    # The flags Kafka's own start scripts use (KAFKA_JVM_PERFORMANCE_OPTS).
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)


def bootstrap_servers(port: int) -> str:
    return f"{HOST}:{port}"


def new_cluster_id() -> str:
    """A random id in Kafka's own format: a UUID as unpadded base64url.

    Like Kafka's Uuid.randomUuid we avoid a leading '-', which CLIs take for a flag.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def server_properties(port: int, controller_port: int, data_dir: Path) -> dict[str, str]:
    return {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.bootstrap.servers": f"{HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        # The relay must notice a missing topic instead of silently creating one.
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # Defaults of 50 partitions make the first consumer group or transaction on a
        # one-node dev broker needlessly slow.
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.num.partitions": "10",
        "group.initial.rebalance.delay.ms": "0",
        # After a crash the restarted broker cannot register until its previous
        # session expires (9 s by default); fault tests crash it on purpose.
        "broker.heartbeat.interval.ms": "1000",
        "broker.session.timeout.ms": "4000",
    }


def render_properties(props: dict[str, str]) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\")

    body = "\n".join(f"{key}={escape(value)}" for key, value in props.items())
    return "# Written by outbox_relay.stack on every start; edits are overwritten.\n" + body + "\n"


def render_log4j2(log_file: Path) -> str:
    """log4j2 config: INFO to a size-capped file, the chattiest loggers at WARN."""
    quiet = ("state.change.logger", "kafka.request.logger", "org.apache.kafka.clients")
    lines = [
        "status = warn",
        "name = relay-stack-kafka",
        "appender.file.type = RollingFile",
        "appender.file.name = FILE",
        f"appender.file.fileName = {log_file}",
        f"appender.file.filePattern = {log_file}.%i",
        "appender.file.layout.type = PatternLayout",
        "appender.file.layout.pattern = [%d] %p %m (%c)%n",
        "appender.file.policies.type = Policies",
        "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
        "appender.file.policies.size.size = 50MB",
        "appender.file.strategy.type = DefaultRolloverStrategy",
        "appender.file.strategy.max = 3",
        "rootLogger.level = INFO",
        "rootLogger.appenderRef.file.ref = FILE",
    ]
    for index, name in enumerate(quiet):
        lines += [f"logger.quiet{index}.name = {name}", f"logger.quiet{index}.level = WARN"]
    return "\n".join(lines) + "\n"


def java_command(paths: StackPaths, jars: Path, heap: tuple[str, ...], *main: str) -> list[str]:
    return [
        java_executable(),
        *heap,
        *_JVM_FLAGS,
        f"-Dlog4j2.configurationFile=file:{paths.kafka_log4j}",
        f"-Dkafka.logs.dir={paths.kafka_root}",
        "-cp",
        str(jars / "*"),
        *main,
    ]


def is_running(paths: StackPaths, pid: int | None) -> bool:
    return process_matches(pid, str(paths.kafka_properties))


def _format_storage(paths: StackPaths, jars: Path) -> None:
    """Format the log dir once; a formatted dir keeps its cluster id forever."""
    if (paths.kafka_data / "meta.properties").is_file():
        return
    argv = java_command(
        paths, jars, TOOL_HEAP, "kafka.tools.StorageTool", "format", "--standalone",
        "-t", new_cluster_id(), "-c", str(paths.kafka_properties),
    )  # fmt: skip
    with paths.kafka_console.open("a") as out:
        result = subprocess.run(
            argv, stdout=out, stderr=subprocess.STDOUT, timeout=120, check=False
        )
    if result.returncode != 0:
        raise failure(SERVICE, "formatting the KRaft storage failed", paths.kafka_console)


def start(paths: StackPaths, port: int, controller_port: int,
          extra_properties: Mapping[str, str] | None = None) -> int:
    """Launch the broker detached from us; returns its pid (not yet ready).

    `extra_properties` override or add to the defaults, e.g. a SASL listener and an
    authorizer for a test broker.
    """
    jars = kafka_jars_dir()
    paths.kafka_root.mkdir(parents=True, exist_ok=True)
    props = {**server_properties(port, controller_port, paths.kafka_data),
             **(extra_properties or {})}
    paths.kafka_properties.write_text(render_properties(props))
    paths.kafka_log4j.write_text(render_log4j2(paths.kafka_log))
    _format_storage(paths, jars)
    argv = java_command(paths, jars, BROKER_HEAP, "kafka.Kafka", str(paths.kafka_properties))
    return spawn_detached(argv, paths.kafka_console, cwd=paths.kafka_root)


def stop(paths: StackPaths, pid: int | None, hard: bool = False) -> None:
    """SIGTERM gives a controlled shutdown; `hard` (SIGKILL) simulates a crash."""
    terminate(pid, str(paths.kafka_properties), timeout=60.0, hard=hard)


def _probe_logger() -> logging.Logger:
    # librdkafka reports every refused connection while the broker boots; keep that
    # noise out of the CLI's stderr and out of pytest's captured logs.
    logger = logging.getLogger("outbox_relay.stack.kafka_probe")
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


def wait_ready(paths: StackPaths, port: int, pid: int, timeout: float,
               client_conf: Mapping[str, Any] | None = None) -> None:
    """Block until the broker answers a metadata request and lists itself.

    `client_conf` adds librdkafka settings, e.g. SASL credentials.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers(port),
        # librdkafka backs off up to 10 s between reconnects by default, which would
        # delay noticing a broker that has just come up.
        "reconnect.backoff.max.ms": 500,
        "logger": _probe_logger(),
        **(client_conf or {}),
    }
    admin = AdminClient(conf)

    def answers() -> bool:
        if process_gone(pid):
            raise failure(SERVICE, "broker process exited", paths.kafka_console, paths.kafka_log)
        try:
            return NODE_ID in admin.list_topics(timeout=3).brokers
        except KafkaException:
            return False

    if not wait_for(answers, timeout, interval=0.25):
        reason = f"no answer on {bootstrap_servers(port)} after {timeout:.0f}s"
        raise failure(SERVICE, reason, paths.kafka_console, paths.kafka_log)

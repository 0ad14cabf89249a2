"""A private Kafka broker with SASL/PLAIN and ACLs, for the tests that need an authorizer.

The same jars and launcher as the shared stack's broker (outbox_relay.stack.kafka), plus a
SASL_PLAINTEXT listener and KRaft's StandardAuthorizer. One broker per test session,
started by the first test that asks for it and stopped at the end of the session.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from outbox_relay.stack import kafka
from outbox_relay.stack.paths import StackPaths
from outbox_relay.stack.proc import HOST, pick_free_ports

ADMIN = ("admin", "admin-secret")
RELAY = ("relay", "relay-secret")
_START_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class SaslBroker:
    bootstrap: str

    def librdkafka_conf(self, user: tuple[str, str]) -> dict[str, str]:
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": user[0], "sasl.password": user[1]}

    def java_conf(self, user: tuple[str, str]) -> dict[str, str]:
        jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="{user[0]}" password="{user[1]}";')
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": jaas}

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, **self.librdkafka_conf(ADMIN)})

    def create_topics(self, topics: dict[str, int]) -> None:
        new = [NewTopic(t, num_partitions=n, replication_factor=1) for t, n in topics.items()]
        admin = self.admin()  # must outlive the futures
        for future in admin.create_topics(new).values():
            future.result()

    def allow(self, user: tuple[str, str], topic: str, *operations: AclOperation) -> None:
        bindings = [
            AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                       f"User:{user[0]}", "*", op, AclPermissionType.ALLOW)
            for op in operations
        ]
        admin = self.admin()
        for future in admin.create_acls(bindings).values():
            future.result()


def sasl_properties(port: int, controller_port: int) -> dict[str, str]:
    """What turns the stack's broker into one that authenticates and authorizes."""
    users = " ".join(f'user_{name}="{password}"' for name, password in (ADMIN, RELAY))
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{ADMIN[0]}" password="{ADMIN[1]}" {users};')
    return {
        "listeners": f"SASL_PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"SASL_PLAINTEXT://{HOST}:{port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # The controller listener stays PLAINTEXT on loopback: the broker half of this
        # combined node talks to its controller half as ANONYMOUS.
        "super.users": f"User:{ADMIN[0]};User:ANONYMOUS",
    }


@pytest.fixture(scope="session", name="sasl_broker")
def sasl_broker_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    paths = StackPaths.resolve(tmp_path_factory.mktemp("sasl-kafka"))
    port, controller = pick_free_ports(2)
    pid = kafka.start(paths, port, controller, sasl_properties(port, controller))
    broker = SaslBroker(kafka.bootstrap_servers(port))
    try:
        client: dict[str, Any] = dict(broker.librdkafka_conf(ADMIN))
        kafka.wait_ready(paths, port, pid, _START_TIMEOUT_S, client)
        yield broker
    finally:
        kafka.stop(paths, pid)

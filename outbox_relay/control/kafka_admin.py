"""What the driver asks Kafka before sending: is it up, do topics exist, which limits apply."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from outbox_relay.config import KafkaConfig
from outbox_relay.errors import UnreachableError
from outbox_relay.observe.client_log import ClientLog
from outbox_relay.rules.topic_names import topic_name_problem as topic_name_problem  # re-exported

log = logging.getLogger(__name__)

_NAMED_UP_TO = 32
_CONFIG_TTL_S = 60.0


@dataclass(frozen=True)
class TopicConfig:
    max_message_bytes: int | None
    compacted: bool  # cleanup.policy has `compact`: the broker refuses records without a key


@dataclass(frozen=True)
class TopicInfo:
    partitions: int
    max_message_bytes: int
    compacted: bool


@dataclass(frozen=True)
class TopicUnavailable:
    """Kafka gave no usable metadata for a topic, and why.

    Only `missing` (the broker itself answered UNKNOWN_TOPIC_OR_PART) may ever make the
    topic's rows doomed, and only after a grace period: a topic being created or its
    metadata propagating says the same for a moment.
    """

    reason: str
    missing: bool


def topic_unavailable(topic: str, error: KafkaError | None) -> TopicUnavailable:
    """What a topic-level metadata error means for the relay.

    Anything but "unknown topic" is an outage that an operator or time cures, never a
    property of the rows: a denied ACL, a leader election, a topic without partitions yet.
    """
    code = error.code() if error is not None else None
    if error is not None and code == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return TopicUnavailable(f"topic {topic!r} does not exist in Kafka", missing=True)
    if error is None:
        return TopicUnavailable(f"Kafka reports no partitions for topic {topic!r} yet", False)
    if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return TopicUnavailable(
            f"not authorized to access topic {topic!r} in Kafka ({error.str()}): "
            "the relay's principal needs Describe and Write on it", missing=False)
    return TopicUnavailable(
        f"Kafka cannot describe topic {topic!r} right now: {error.name()} ({error.str()})",
        missing=False)


def librdkafka_conf(kafka: KafkaConfig) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": kafka.bootstrap_servers}
    conf.update(kafka.librdkafka_options)
    return conf


class KafkaAdmin:
    """Topic metadata through confluent-kafka, with topic configs cached for a minute."""

    def __init__(self, kafka: KafkaConfig) -> None:
        self._kafka = kafka
        self._log = ClientLog()
        # Asking for a topic by name must never create it on a broker that allows that.
        conf: dict[str, Any] = {**librdkafka_conf(kafka), "logger": self._log,
                                "allow.auto.create.topics": False}
        self._client = AdminClient(conf)
        self._configs: dict[str, tuple[float, TopicConfig]] = {}

    def check_reachable(self) -> None:
        self._log.last_failure = None
        try:
            md = self._client.list_topics(timeout=self._kafka.admin_timeout_s)
        except KafkaException as exc:
            self._client.poll(0)  # hands the queued log lines over, last_failure included
            error = exc.args[0]
            reason = error.str() if hasattr(error, "str") else str(error)
            if self._log.last_failure:
                reason += f"; last connection error: {self._log.last_failure}"
            raise UnreachableError(
                f"cannot reach Kafka at {self._kafka.bootstrap_servers}: {reason}"
            ) from None
        self._client.poll(0)
        if not md.brokers:
            raise UnreachableError(f"cannot reach Kafka at {self._kafka.bootstrap_servers}")

    def describe(self, topics: Collection[str]) -> dict[str, TopicInfo | TopicUnavailable]:
        """Partitions, max.message.bytes and compaction per topic, or why there are none."""
        self._client.poll(0)
        # A full listing costs about 10 us per topic on the broker (17 ms with 1,763
        # topics, once per round of W2), one naming a topic 0.2 ms: few topics are named.
        listed = (self._client.list_topics(timeout=self._kafka.admin_timeout_s).topics
                  if len(topics) > _NAMED_UP_TO else {})
        found: dict[str, TopicInfo | TopicUnavailable] = {}
        present = []
        for topic in topics:
            meta = listed.get(topic)
            if meta is None:
                # A full listing leaves out the topics this principal may not describe as
                # well as the missing ones; only a request naming the topic tells them apart.
                meta = self._client.list_topics(
                    topic, timeout=self._kafka.admin_timeout_s).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                found[topic] = topic_unavailable(topic, meta.error if meta else None)
            else:
                present.append((topic, len(meta.partitions)))
        configs = self._topic_configs([t for t, _ in present])
        for topic, partitions in present:
            config = configs.get(topic, TopicConfig(None, False))
            found[topic] = TopicInfo(partitions,
                                     config.max_message_bytes or self._kafka.max_request_size,
                                     config.compacted)
        return found

    def _topic_configs(self, topics: list[str]) -> dict[str, TopicConfig]:
        """The configs that decide what the broker refuses, each re-read after a minute.

        A config changed within that minute is seen only by the broker: what it then
        refuses is isolated after the failed write instead of caught here.
        """
        now = time.monotonic()
        stale = [t for t in topics if t not in self._configs
                 or now - self._configs[t][0] > _CONFIG_TTL_S]
        if stale:
            resources = [ConfigResource(ResourceType.TOPIC, t) for t in stale]
            futures = self._client.describe_configs(
                resources, request_timeout=self._kafka.admin_timeout_s
            )
            for resource, future in futures.items():
                try:
                    entries = future.result()
                except KafkaException as exc:
                    log.warning("cannot read the config of topic %s: %s", resource.name, exc)
                    continue
                self._configs[resource.name] = (now, _topic_config(entries))
        return {t: self._configs[t][1] for t in topics if t in self._configs}


def _topic_config(entries: dict[str, Any]) -> TopicConfig:
    size = entries.get("max.message.bytes")
    policy = entries.get("cleanup.policy")
    policies = {p.strip() for p in str(policy.value or "").split(",")} if policy else set()
    return TopicConfig(
        int(size.value) if size is not None and size.value is not None else None,
        "compact" in policies,
    )

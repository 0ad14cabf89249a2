"""What fails for certain is caught before a round sends anything: per locked topic,
its name, its existence on the broker, its partition count and its size limit."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from outbox_relay import failpoints
from outbox_relay.config import Config, TopicRule
from outbox_relay.control.claims import TopicLimits
from outbox_relay.control.db import Database
from outbox_relay.control.kafka_admin import (
    KafkaAdmin,
    TopicInfo,
    TopicUnavailable,
    topic_name_problem,
)
from outbox_relay.control.topic_meta import TopicMeta
from outbox_relay.rules.cloudevent_topics import TopicFlags, allowance
from outbox_relay.rules.partitioners import Partitioner
from outbox_relay.rules.record_size import payload_allowance
from outbox_relay.rules.topic_rules import rule_for
from outbox_relay.stream.failures import OUTAGE_PREFIX, describe_failure

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicCheckSettings:
    """What the check reads of the profile: the size bound's inputs and the rules."""

    max_request_size: int
    compression_type: str
    missing_topic_grace_s: float
    header_prefix: str
    source_name: str
    partitioner: Partitioner
    topic_rules: list[TopicRule]

    @classmethod
    def of(cls, config: Config) -> TopicCheckSettings:
        kafka, relay = config.kafka, config.relay
        return cls(kafka.max_request_size, kafka.compression_type, kafka.missing_topic_grace_s,
                   relay.header_prefix, relay.source_name, relay.partitioner,
                   list(relay.topic_rules))


class TopicCheck:
    def __init__(self, db: Database, admin: KafkaAdmin, settings: TopicCheckSettings) -> None:
        self._admin = admin
        self._settings = settings
        self._meta = TopicMeta(db)

    def validate(
        self, locked: list[str], errors: dict[str, str]
    ) -> tuple[list[TopicLimits], dict[str, str]]:
        """What fails for certain is caught before anything is sent.

        Returns the limits of the sendable topics, whose partition counts it stores for
        the read (outbox_relay/schemas/0014), and the topics Kafka will never accept (illegal
        name, missing beyond the grace period) with the reason. An outage is only an
        error: it must never make a healthy row look doomed.
        """
        settings = self._settings
        doomed = {t: p for t in locked if (p := topic_name_problem(t)) is not None}
        named = [t for t in locked if t not in doomed]
        try:
            infos = self._admin.describe(named) if named else {}
        except Exception as exc:
            reason = f"{OUTAGE_PREFIX}{describe_failure(exc)}"
            errors.update({t: reason for t in named})
            return [], doomed
        present = {t: i for t in named if isinstance(i := infos.get(t), TopicInfo)}
        self._note_partitions({t: i.partitions for t, i in present.items()})
        self._sort_unavailable(
            {t: i for t, i in infos.items() if isinstance(i, TopicUnavailable)}, errors, doomed)
        limits = []
        for topic, info in present.items():
            # The failpoint plays a limit lowered after the topic's config was read.
            topic_bytes = (settings.max_request_size
                           if failpoints.armed("stale_max_message_bytes")
                           else info.max_message_bytes)
            plain = payload_allowance(topic_bytes, settings.max_request_size,
                                      settings.compression_type, settings.header_prefix,
                                      settings.source_name)
            rule = rule_for(settings.topic_rules, topic)
            # A CloudEvents topic's records carry the attributes the relay adds, too.
            max_bytes = allowance(plain, settings.source_name, rule)
            # The failpoint plays a topic turned compacted after its config was read.
            key_required = info.compacted and not failpoints.armed("stale_topic_config")
            limits.append(TopicLimits(topic, max_bytes, rule.compact, key_required,
                                      info.partitions, settings.partitioner,
                                      TopicFlags.of(rule)))
        return limits, doomed

    def _sort_unavailable(self, unavailable: dict[str, TopicUnavailable],
                          errors: dict[str, str], doomed: dict[str, str]) -> None:
        """A topic the broker has called missing for longer than the grace is doomed;
        every other unavailable topic is in error and backs off."""
        grace = self._settings.missing_topic_grace_s
        missing_for = self._meta.note_missing(
            [t for t, u in unavailable.items() if u.missing])
        for topic, u in unavailable.items():
            seconds = missing_for.get(topic)
            if seconds is None:
                errors[topic] = u.reason
            elif seconds >= grace:
                doomed[topic] = f"{u.reason} (reported missing for {seconds:.0f} s)"
            else:
                errors[topic] = (f"{u.reason} (for {seconds:.0f} s so far; it counts as "
                                 f"missing after kafka.missing_topic_grace_s = {grace:g} s)")

    def _note_partitions(self, counts: dict[str, int]) -> None:
        for change in self._meta.note_present(counts):
            log.warning(
                "topic %s went from %d to %d partitions: keys now map to other partitions, "
                "so a key's messages before and after this point may sit in two partitions",
                change.topic, change.before, change.after,
            )

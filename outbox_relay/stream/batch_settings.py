"""What a batch body (outbox_relay.stream.batch) reads of the profile."""

from __future__ import annotations

from dataclasses import dataclass

from outbox_relay.config import Config


@dataclass(frozen=True)
class BatchSettings:
    """What a batch body reads of the profile."""

    micro_batch_s: float
    poll_interval_s: float
    lock_timeout_s: float
    include_topics: list[str]
    exclude_topics: list[str]
    idle_poll_interval_s: float = 0.25

    @classmethod
    def of(cls, config: Config) -> BatchSettings:
        relay = config.relay
        return cls(relay.micro_batch_s, relay.poll_interval_s, relay.lock_timeout_s,
                   list(relay.include_topics), list(relay.exclude_topics),
                   relay.idle_poll_interval_s)

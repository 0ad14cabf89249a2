"""Configuration: the models of a profile (profile, and its sections: models), loading a
profile from TOML and the environment (load, env), and the checks the models' validators
share (checks).

The models are exported here, so `from outbox_relay.config import Config` names them wherever
they live; loading is imported from `outbox_relay.config.load`."""

from outbox_relay.config.models import (
    DEFAULT_TOP_TOPICS,
    MAX_HEADER_PREFIX_BYTES,
    MAX_SOURCE_NAME_BYTES,
    KafkaConfig,
    LedgerConfig,
    MetricsConfig,
    PostgresConfig,
    RelaySettings,
    SparkSettings,
)
from outbox_relay.config.profile import Config
from outbox_relay.config.topic_rule import TopicRule

__all__ = [
    "DEFAULT_TOP_TOPICS",
    "MAX_HEADER_PREFIX_BYTES",
    "MAX_SOURCE_NAME_BYTES",
    "Config",
    "KafkaConfig",
    "LedgerConfig",
    "MetricsConfig",
    "PostgresConfig",
    "RelaySettings",
    "SparkSettings",
    "TopicRule",
]

"""The whole profile: its sections (outbox_relay.config.models), the rules that span them,
and how the environment names each key (loaded by outbox_relay.config.load)."""

from __future__ import annotations

from typing import Any

from pydantic import model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from outbox_relay.config.checks import check_lock_timeouts
from outbox_relay.config.models import (
    KafkaConfig,
    LedgerConfig,
    MetricsConfig,
    PostgresConfig,
    RelaySettings,
    SparkSettings,
)


class Config(BaseSettings):
    """A whole profile. Its settings say how the environment names each key:
    RELAY_KAFKA__LINGER_MS is kafka.linger_ms, a list or a table is JSON, an empty variable
    is unset. outbox_relay.config.load lays that environment over the profile's TOML."""

    model_config = SettingsConfigDict(extra="forbid", frozen=True, env_prefix="RELAY_",
                                      env_nested_delimiter="__", env_ignore_empty=True,
                                      case_sensitive=False)

    postgres: PostgresConfig = PostgresConfig()
    kafka: KafkaConfig = KafkaConfig()
    ledger: LedgerConfig = LedgerConfig()
    relay: RelaySettings = RelaySettings()
    spark: SparkSettings = SparkSettings()
    metrics: MetricsConfig = MetricsConfig()

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Built from what it is given only: load.build_config chooses the environment (the
        # process's, a test's, the driver's for its child), so no model reads os.environ
        # behind its back, and it names the variable of a bad value.
        return (init_settings,)

    @model_validator(mode="before")
    @classmethod
    def _derive_statement_timeout(cls, data: Any) -> Any:
        """Unset, the control plane's statement timeout is half the lock timeout."""
        if not isinstance(data, dict):
            return data
        pg, settings = data.get("postgres", {}), data.get("relay", {})
        if not isinstance(pg, dict) or not isinstance(settings, dict):
            return data  # validation reports the wrong type
        default_lock_s = RelaySettings.model_fields["lock_timeout_s"].default
        lock_s = settings.get("lock_timeout_s", default_lock_s)
        if "statement_timeout_ms" in pg or not isinstance(lock_s, int | float) or lock_s <= 0:
            return data
        return {**data, "postgres": {**pg, "statement_timeout_ms": max(1, int(lock_s * 500))}}

    @model_validator(mode="after")
    def _timeouts_keep_the_lock(self) -> Config:
        check_lock_timeouts(self.relay.lock_timeout_s, self.relay.heartbeat_interval_s,
                            self.postgres.statement_timeout_ms)
        return self

"""The whole profile: its sections (outbox_relay.config.models), the rules that span them,
and how the environment names each key (loaded by outbox_relay.config.load)."""

from __future__ import annotations

import posixpath
from typing import Any

from pydantic import field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from outbox_relay.config.checks import at_most_bytes, check_lock_timeouts
from outbox_relay.config.databases import (
    CatalogConfig,
    DatabaseEntry,
    source_of,
    unique_names,
)
from outbox_relay.config.models import (
    MAX_SOURCE_NAME_BYTES,
    KafkaConfig,
    LedgerConfig,
    MetricsConfig,
    PostgresConfig,
    RelaySettings,
    SparkSettings,
)

# The [postgres] timeouts that, unset, are half the lock timeout.
DERIVED_FROM_LOCK = ("statement_timeout_ms", "idle_in_transaction_timeout_ms")


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
    # Several outbox databases (outbox_relay.config.databases), listed here or by a
    # catalog's query, or both; neither: [postgres]'s one.
    databases: list[DatabaseEntry] = []
    catalog: CatalogConfig | None = None

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
    def _derive_control_timeouts(cls, data: Any) -> Any:
        """Unset, the control plane's statement and idle-in-transaction timeouts are each
        half the lock timeout."""
        if not isinstance(data, dict):
            return data
        pg, settings = data.get("postgres", {}), data.get("relay", {})
        if not isinstance(pg, dict) or not isinstance(settings, dict):
            return data  # validation reports the wrong type
        default_lock_s = RelaySettings.model_fields["lock_timeout_s"].default
        lock_s = settings.get("lock_timeout_s", default_lock_s)
        if not isinstance(lock_s, int | float) or lock_s <= 0:
            return data
        derived = {key: max(1, int(lock_s * 500)) for key in DERIVED_FROM_LOCK if key not in pg}
        return {**data, "postgres": {**pg, **derived}} if derived else data

    @model_validator(mode="after")
    def _timeouts_keep_the_lock(self) -> Config:
        check_lock_timeouts(self.relay.lock_timeout_s, self.relay.heartbeat_interval_s,
                            self.postgres.statement_timeout_ms,
                            self.postgres.idle_in_transaction_timeout_ms)
        return self

    @field_validator("databases")
    @classmethod
    def _unique_databases(cls, value: list[DatabaseEntry]) -> list[DatabaseEntry]:
        return unique_names(value)

    @model_validator(mode="after")
    def _short_database_sources(self) -> Config:
        for i, entry in enumerate(self.databases):
            try:
                at_most_bytes(source_of(self.relay.source_name, entry.name),
                              MAX_SOURCE_NAME_BYTES)
            except ValueError as exc:
                raise ValueError(f"databases.{i}.name: with relay.source_name, {exc}") from None
        return self

    @property
    def many(self) -> bool:
        """Whether the profile names its databases ([[databases]] or [catalog]), even if
        only one."""
        return bool(self.databases) or self.catalog is not None

    def database_names(self) -> list[str]:
        return [entry.name for entry in self.databases]

    def for_database(self, name: str) -> Config:
        """The one-database profile of database `name`: its URL, password and topic keys,
        and its name in the source of its records and in its ledger's and checkpoint's
        paths, so that no two databases' relays share state. KeyError: no such name."""
        entry = next((e for e in self.databases if e.name == name), None)
        if entry is None:
            raise KeyError(name)
        return self.for_entry(entry)

    def for_entry(self, entry: DatabaseEntry) -> Config:
        """for_database of an entry the profile need not hold (a catalog's)."""
        name = entry.name
        relay = self.relay
        topics = {key: getattr(entry, key) for key in
                  ("include_topics", "exclude_topics", "topic_rules")
                  if getattr(entry, key) is not None}
        return self.model_copy(update={
            "databases": [], "catalog": None,
            "postgres": self.postgres.model_copy(update={
                "url": entry.url, "password": entry.password,
                "password_env": entry.password_variable}),
            "relay": relay.model_copy(update={
                **topics, "source_name": source_of(relay.source_name, name),
                "checkpoint_path": posixpath.join(relay.checkpoint_path, name)}),
            "ledger": self.ledger.model_copy(update={
                "path": posixpath.join(self.ledger.path, name)}),
        })

    def each_database(self) -> list[tuple[str | None, Config]]:
        """(name, one-database profile) for every database the profile lists (a catalog's
        are read at run time: outbox_relay.control.catalog); a profile without
        [[databases]] nor [catalog] relays its one, unnamed."""
        if not self.many:
            return [(None, self)]
        return [(name, self.for_database(name)) for name in self.database_names()]

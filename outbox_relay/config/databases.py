"""The outbox databases of a profile that relays several (`[[databases]]`), and how one of
them becomes a one-database profile (Config.for_database): its URL and password, its
topic filters and rules, and its own name wherever one relay's state must not mix with
another's (the source name in every record, the ledger, the checkpoint).

A profile without `[[databases]]` relays the one database of `[postgres]`, as always.
With them, `[postgres]` holds what every database shares (sslmode, timeouts) and its URL
is unused; each database's password comes only from the environment variable its
`password_env` names (default RELAY_POSTGRES_PASSWORD_<NAME>, the name upper-cased with
`-` as `_`), which a Databricks job fills from a secret like any other variable.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from outbox_relay.config.base import StrictModel
from outbox_relay.config.checks import check_postgres_url, check_regex
from outbox_relay.config.topic_rule import TopicRule

# The name travels in records' source header, a path of the ledger and the checkpoint,
# and metric labels: a slug keeps it safe in all of them.
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
PASSWORD_ENV_PREFIX = "RELAY_POSTGRES_PASSWORD_"
# What joins the relay's source name and a database's name in its records' source header.
SOURCE_SEPARATOR = "/"


def source_of(source_name: str, database: str) -> str:
    """The source name of a database's records: the relay's and the database's."""
    return f"{source_name}{SOURCE_SEPARATOR}{database}"


def default_password_env(name: str) -> str:
    return PASSWORD_ENV_PREFIX + name.upper().replace("-", "_")


class DatabaseEntry(StrictModel):
    """One outbox database of a profile; None in a filter or rule key keeps the profile's
    `[relay]` value for it."""

    name: str
    url: str
    password_env: str | None = None
    # Set at load from the variable password_env names, never from the profile.
    password: SecretStr | None = None
    include_topics: list[str] | None = None
    exclude_topics: list[str] | None = None
    topic_rules: list[TopicRule] | None = None

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not NAME.fullmatch(value):
            raise ValueError("must be 1-63 of a-z, 0-9, '-' and '_', starting with a "
                             "letter or digit")
        return value

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, value: str) -> str:
        if urlsplit(value).password is not None:
            raise ValueError(f"carries a password, which only the variable password_env "
                             f"names (default {PASSWORD_ENV_PREFIX}<NAME>) may hold")
        return check_postgres_url(value)

    @field_validator("include_topics", "exclude_topics")
    @classmethod
    def _valid_regexes(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [check_regex(v) for v in value]

    @property
    def password_variable(self) -> str:
        return self.password_env or default_password_env(self.name)


def unique_names(entries: list[DatabaseEntry]) -> list[DatabaseEntry]:
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        if entry.name in seen:
            raise ValueError(f"databases.{i}.name: {entry.name!r} names two databases")
        seen.add(entry.name)
    return entries


CATALOG_PASSWORD_ENV = "RELAY_CATALOG_PASSWORD"


class CatalogConfig(StrictModel):
    """The databases listed by a query on a catalog database (a tenants table), read
    again every `databases_refresh_s` by a continuous relay (outbox_relay.control.catalog).
    The query returns a row per database with the columns `name` and `url`; each
    database's password comes from `databases_password_env` if set (one for all), else
    from the default variable of its name."""

    url: str
    password_env: str = Field(CATALOG_PASSWORD_ENV, min_length=1)
    # Set at load from the variable password_env names, never from the profile.
    password: SecretStr | None = None
    query: str = Field(min_length=1)
    databases_refresh_s: float = Field(30.0, gt=0)
    databases_password_env: str | None = Field(None, min_length=1)

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, value: str) -> str:
        if urlsplit(value).password is not None:
            raise ValueError("carries a password, which only the variable password_env "
                             f"names (default {CATALOG_PASSWORD_ENV}) may hold")
        return check_postgres_url(value)

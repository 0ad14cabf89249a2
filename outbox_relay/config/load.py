"""Configuration loading: a TOML profile with the environment laid over it
(outbox_relay.config.env), into outbox_relay.config's models, with one error line naming
the key, and the variable when the value came from one (exit 2), when anything is wrong.
"""

from __future__ import annotations

import copy
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import ValidationError

from outbox_relay.config import Config
from outbox_relay.config.databases import CATALOG_PASSWORD_ENV, default_password_env
from outbox_relay.config.env import PASSWORD_ENV, EnvLayer, merge, read_environment
from outbox_relay.config.local_stack import resolve_local_stack
from outbox_relay.errors import ConfigError


def _split_password(data: dict[str, Any], env: Mapping[str, str]) -> None:
    """Move a password out of the URL into the secret field, so no URL ever carries it."""
    pg = data.setdefault("postgres", {})
    if not isinstance(pg, dict):
        return  # validation reports the wrong type
    url = pg.get("url")
    if isinstance(url, str) and urlsplit(url).password is not None:
        pg["url"], pg["password"], sslmode = _without_password(url)
        if sslmode:
            pg.setdefault("sslmode", sslmode)
    _from_variable(pg, PASSWORD_ENV, env)


def _without_password(url: str) -> tuple[str, str, str | None]:
    """(the URL without its password and query, the password, the query's sslmode)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[1]
    bare = parts._replace(netloc=f"{parts.username}@{host}", query="").geturl()
    sslmode = parse_qs(parts.query).get("sslmode")
    return bare, unquote(parts.password or ""), sslmode[0] if sslmode else None


def _database_passwords(data: dict[str, Any], env: Mapping[str, str]) -> None:
    """Each database's password, and the catalog's, from the variable its entry names
    (never from the profile)."""
    entries = data.get("databases")
    # Validation reports a wrong type.
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(entry, dict):
            name = entry.get("name")
            _from_variable(entry, default_password_env(name) if isinstance(name, str) else None,
                           env, f"databases.{i}")
    catalog = data.get("catalog")
    if isinstance(catalog, dict):
        _from_variable(catalog, CATALOG_PASSWORD_ENV, env, "catalog")


def _from_variable(table: dict[str, Any], default: str | None, env: Mapping[str, str],
                   key: str | None = None) -> None:
    """`table`'s password from the variable its password_env names (else `default`); a
    table `key` names must not hold one itself."""
    if key is not None and "password" in table:
        raise ConfigError(f"invalid config key {key}.password: secrets are read from the "
                          "variable password_env names, never from a profile")
    variable = table.get("password_env") or default
    if isinstance(variable, str) and env.get(variable):
        table["password"] = env[variable]


def _describe(exc: ValidationError, layer: EnvLayer) -> str:
    first = exc.errors()[0]
    path = tuple(str(p) for p in first["loc"])
    key = ".".join(path) or "<root>"
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown setting"
    elif first["type"] == "value_error" and ": " in str(first["ctx"]["error"]):
        # A rule over several keys names the one to change first in its message.
        named, _, msg = str(first["ctx"]["error"]).partition(": ")
        if not first["loc"] or named.startswith(f"{key}."):
            key, path = named, tuple(named.split("."))
    variable = layer.variable_for(path)
    source = f" (from {variable})" if variable else ""
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"invalid config key {key}{source}: {msg}{more}"


def build_config(data: dict[str, Any], env: Mapping[str, str] | None = None) -> Config:
    """Validate a profile's tables with the environment laid over them."""
    env = os.environ if env is None else env
    if isinstance(data.get("postgres"), dict) and "password" in data["postgres"]:
        raise ConfigError(
            f"invalid config key postgres.password: secrets are read from {PASSWORD_ENV}, "
            "never from a profile"
        )
    layer = read_environment(env)
    data = merge(data, copy.deepcopy(layer.values))
    resolve_local_stack(data)
    _split_password(data, env)
    _database_passwords(data, env)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, layer)) from None


def select_database(config: Config, database: str | None) -> Config:
    """`database`'s one-database profile (Config.for_database) when it is given; a
    catalog's databases: outbox_relay.control.catalog.database_config."""
    if database is None:
        return config
    if not config.many:
        raise ConfigError(f"--database {database}: the profile names no databases "
                          "([[databases]]); it relays [postgres]'s one")
    try:
        return config.for_database(database)
    except KeyError:
        raise ConfigError(f"--database {database}: the profile names no such database (it "
                          f"names {', '.join(config.database_names())})") from None


def one_database(config: Config) -> Config:
    """`config`, which a command that acts on one database needs: ConfigError for a
    profile of several databases that no --database narrowed."""
    if config.many:
        listed = (f"names {len(config.databases)} databases "
                  f"({', '.join(config.database_names())})" if config.databases else
                  "lists its databases in a catalog")
        raise ConfigError(f"the profile {listed}: choose one with --database NAME")
    return config


def load_config(path: str | Path | None, env: Mapping[str, str] | None = None) -> Config:
    """Load a TOML profile (or only defaults and environment when path is None)."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    return build_config(data, env)


def to_json_without_secrets(config: Config) -> str:
    """The config for another process on the driver node; secrets stay in the environment.
    The Kafka option tables stay out too: their `env:NAME` values were resolved into
    secrets when the profile was read, and the one process this is for (the streaming
    source) talks to PostgreSQL only."""
    return config.model_dump_json(exclude={"postgres": {"password"},
                                           "kafka": {"java_options", "librdkafka_options"},
                                           "databases": {"__all__": {"password"}},
                                           "catalog": {"password"}})


def from_json_without_secrets(text: str, env: Mapping[str, str] | None = None) -> Config:
    """The same config in another process on the driver node (the streaming source's
    Python worker), its secrets found again the way the driver found them.

    Only the secrets: the driver's values are final. The environment laid over them again
    undid what a relay of several databases derives for each (Config.for_entry): with
    RELAY_POSTGRES_URL set, every database's source polled that one database, found no
    work there, and a drain's query ended at its start with the backlog left over."""
    env = os.environ if env is None else env
    data = json.loads(text)
    pg = data.setdefault("postgres", {})
    _from_variable(pg, PASSWORD_ENV, env)
    if "password" not in pg:
        _password_of_the_url_variable(pg, env)
    _database_passwords(data, env)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, read_environment({}))) from None


def _password_of_the_url_variable(pg: dict[str, Any], env: Mapping[str, str]) -> None:
    """The password the driver took out of RELAY_POSTGRES_URL (_split_password), when that
    variable names this same URL."""
    url = read_environment(env).values.get("postgres", {}).get("url")
    if isinstance(url, str) and urlsplit(url).password is not None:
        bare, password, _ = _without_password(url)
        if bare == pg.get("url"):
            pg["password"] = password

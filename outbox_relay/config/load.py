"""Configuration loading: a TOML profile plus environment overrides, into outbox_relay.config's
models, with one error line naming the key (exit 2) when anything is wrong.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import ValidationError

from outbox_relay.config import Config
from outbox_relay.errors import ConfigError

ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "RELAY_POSTGRES_URL": ("postgres", "url"),
    "RELAY_KAFKA_BOOTSTRAP_SERVERS": ("kafka", "bootstrap_servers"),
    "RELAY_LEDGER_PATH": ("ledger", "path"),
    "RELAY_CHECKPOINT_PATH": ("relay", "checkpoint_path"),
    "RELAY_SOURCE_NAME": ("relay", "source_name"),
    # Where a drain pushes its counters: a deployment's address, like the others here.
    "RELAY_PUSHGATEWAY_URL": ("metrics", "pushgateway_url"),
}
PASSWORD_ENV = "RELAY_POSTGRES_PASSWORD"


def _set_path(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"config key {part!r} must be a table")
        node = child
    node[path[-1]] = value


def _split_password(data: dict[str, Any], env: Mapping[str, str]) -> None:
    """Move a password out of the URL into the secret field, so no URL ever carries it."""
    pg = data.setdefault("postgres", {})
    if not isinstance(pg, dict):
        return  # validation reports the wrong type
    url = pg.get("url")
    if isinstance(url, str) and urlsplit(url).password is not None:
        parts = urlsplit(url)
        pg["password"] = unquote(parts.password or "")
        host = parts.netloc.rsplit("@", 1)[1]
        pg["url"] = parts._replace(netloc=f"{parts.username}@{host}", query="").geturl()
        sslmode = parse_qs(parts.query).get("sslmode")
        if sslmode:
            pg.setdefault("sslmode", sslmode[0])
    if env.get(PASSWORD_ENV):
        pg["password"] = env[PASSWORD_ENV]


def _describe(exc: ValidationError) -> str:
    first = exc.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "<root>"
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown setting"
    elif first["type"] == "value_error" and ": " in str(first["ctx"]["error"]):
        # A rule over several keys names the one to change first in its message.
        named, _, msg = str(first["ctx"]["error"]).partition(": ")
        if not first["loc"] or named.startswith(f"{key}."):
            key = named
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"invalid config key {key}: {msg}{more}"


def build_config(data: dict[str, Any], env: Mapping[str, str] | None = None) -> Config:
    """Validate a raw mapping after applying environment overrides."""
    env = os.environ if env is None else env
    for var, path in ENV_OVERRIDES.items():
        if env.get(var):
            _set_path(data, path, env[var])
    if isinstance(data.get("postgres"), dict) and "password" in data["postgres"]:
        raise ConfigError(
            f"invalid config key postgres.password: secrets are read from {PASSWORD_ENV}, "
            "never from a profile"
        )
    _split_password(data, env)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


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
    """The config for another process on the driver node; secrets stay in the environment."""
    return config.model_dump_json(exclude={"postgres": {"password"}})


def from_json_without_secrets(text: str, env: Mapping[str, str] | None = None) -> Config:
    """The same config, with its secrets found again the way the driver found them."""
    return build_config(json.loads(text), env)

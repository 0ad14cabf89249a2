"""The environment's layer of a profile: every key as RELAY_<SECTION>__<KEY>.

pydantic-settings reads the variables the way Config's settings name them
(outbox_relay.config.profile: prefix RELAY_, nested delimiter `__`, lists and tables as
JSON, an empty variable unset, names not case-sensitive). Six older names stay, as
aliases of one key each; a nested name set too wins over its alias. The layer remembers
which variable set which key, so that an error can name the variable it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic_settings import EnvSettingsSource, SettingsError

from outbox_relay.config.profile import Config
from outbox_relay.errors import ConfigError

PREFIX = Config.model_config["env_prefix"]
DELIMITER = Config.model_config["env_nested_delimiter"]
PASSWORD_ENV = "RELAY_POSTGRES_PASSWORD"
# The names documented before every key had one; each still sets its key.
ENV_ALIASES: dict[str, tuple[str, str]] = {
    "RELAY_POSTGRES_URL": ("postgres", "url"),
    "RELAY_KAFKA_BOOTSTRAP_SERVERS": ("kafka", "bootstrap_servers"),
    "RELAY_LEDGER_PATH": ("ledger", "path"),
    "RELAY_CHECKPOINT_PATH": ("relay", "checkpoint_path"),
    "RELAY_SOURCE_NAME": ("relay", "source_name"),
    "RELAY_PUSHGATEWAY_URL": ("metrics", "pushgateway_url"),
}

Path = tuple[str, ...]


def key_path(name: str) -> Path | None:
    """The key a variable of the nested form names (known or not), else None."""
    if not name.upper().startswith(PREFIX):
        return None
    parts = tuple(name[len(PREFIX):].lower().split(DELIMITER))
    if len(parts) == 1 and parts[0] not in Config.model_fields:
        return None  # RELAY_STACK_DIR, RELAY_LOG_LEVEL, ...: read elsewhere
    return parts if all(parts) else None


def reads_variable(name: str) -> bool:
    """Whether loading a profile reads this variable."""
    return name in ENV_ALIASES or name == PASSWORD_ENV or key_path(name) is not None


class _Source(EnvSettingsSource):
    """Config's environment source over a given mapping instead of os.environ."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(Config)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v for k, v in self._environ.items() if v or not self.env_ignore_empty}


@dataclass(frozen=True)
class EnvLayer:
    values: dict[str, Any]  # nested, as a profile's tables
    variables: dict[Path, str]  # the key each variable set

    def variable_for(self, key: Path) -> str | None:
        """The variable the value at `key` came from, if the environment set it: the one
        that set `key` or a table or list around it."""
        node: Any = self.values
        for part in key:
            if not isinstance(node, dict):
                break  # a list or a value the environment set whole
            if part not in node:
                return None
            node = node[part]
        around = [path for path in self.variables if key[:len(path)] == path]
        return self.variables[max(around, key=len)] if around else None


def read_environment(env: Mapping[str, str]) -> EnvLayer:
    """The keys `env` sets, aliases first and the nested names over them."""
    values: dict[str, Any] = {}
    variables: dict[Path, str] = {}
    for name, (section, key) in ENV_ALIASES.items():
        if env.get(name):
            values.setdefault(section, {})[key] = env[name]
            variables[(section, key)] = name
    nested = {name: path for name, value in env.items() if value
              for path in [key_path(name)] if path is not None}
    for name, path in nested.items():
        if path[0] not in Config.model_fields:
            raise ConfigError(f"invalid config key {'.'.join(path)} (from {name}): "
                              "unknown setting")
    try:
        merge(values, _Source(env)())
    except SettingsError:
        raise ConfigError(_not_json(nested, env)) from None
    variables.update({path: name for name, path in nested.items()})
    return EnvLayer(values, variables)


def _not_json(nested: dict[str, Path], env: Mapping[str, str]) -> str:
    """The line for the list or table that is not JSON, found by reading each variable
    alone; never its value, which may hold a secret."""
    for name, path in sorted(nested.items()):
        try:
            _Source({name: env[name]})()
        except SettingsError:
            return (f"invalid config key {'.'.join(path)} (from {name}): not valid JSON "
                    "(lists and tables are given as JSON)")
    return "invalid configuration in the environment: a RELAY_ variable could not be read"


def merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` laid on `base` in place: tables merge key by key, anything else replaces."""
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base

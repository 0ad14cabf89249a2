"""The options every command takes, before or after its sub-command: --config, --database,
--log-level, --log-format, each defaulting to its environment variable.

`outbox-relay` gives them to its own parser with the defaults, and to every sub-command's
parser (CommandParser) without any: a sub-command's value then replaces one given before it
(the last wins), and one not given there leaves the earlier value alone, which a default
would overwrite. jobs/relay.py's parser (outbox_relay.app) takes them with the defaults.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from outbox_relay.observe.logs import LOG_FORMATS

if TYPE_CHECKING:
    from outbox_relay.config import Config

CONFIG_ENV = "RELAY_CONFIG"
LOG_LEVEL_ENV = "RELAY_LOG_LEVEL"
LOG_FORMAT_ENV = "RELAY_LOG_FORMAT"
DATABASE_ENV = "RELAY_DATABASE"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(text: str) -> str:
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(LOG_LEVELS)}")
    return text


def _log_format(text: str) -> str:
    # A type rather than `choices`: argparse checks a default from the environment (a
    # string) through the type, never against the choices.
    if text not in LOG_FORMATS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(LOG_FORMATS)}")
    return text


def add_global_options(parser: argparse.ArgumentParser, *, defaults: bool = True) -> None:
    """The four options, with the environment's defaults or (a sub-command's) with none."""

    def default(value: str | None) -> str | None:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("--config", default=default(os.environ.get(CONFIG_ENV)),
                        help=f"TOML profile, e.g. conf/local.toml (default: {CONFIG_ENV}, "
                        "else built-in defaults)")
    parser.add_argument("--database", metavar="NAME", default=default(os.environ.get(DATABASE_ENV)),
                        help="of a profile's [[databases]], the one to act on (default: "
                        f"{DATABASE_ENV}, else every database, where the command takes "
                        "several)")
    parser.add_argument("--log-level", type=_log_level, metavar="LEVEL",
                        default=default(os.environ.get(LOG_LEVEL_ENV, "INFO")),
                        help=f"{', '.join(LOG_LEVELS)} (default: {LOG_LEVEL_ENV}, else INFO)")
    parser.add_argument("--log-format", type=_log_format, metavar="{text,json}",
                        default=default(os.environ.get(LOG_FORMAT_ENV, "text")),
                        help="json: one object per line (time, level, logger, message, "
                        f"exception); default: {LOG_FORMAT_ENV}, else text")


class CommandParser(argparse.ArgumentParser):
    """A sub-command's parser (and, through add_subparsers, its own sub-commands'): it
    takes the global options too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        add_global_options(self, defaults=False)


def profile(args: argparse.Namespace) -> Config:
    """The profile a command acts on: --config, every database of it unless --database
    chose one (the profile's, or one its catalog lists)."""
    from outbox_relay.config.load import load_config

    config = load_config(args.config)
    if args.database is None:
        return config
    from outbox_relay.control.catalog import database_config

    return database_config(config, args.database, os.environ)


def one_profile(args: argparse.Namespace) -> Config:
    """The profile of a command that acts on one database."""
    from outbox_relay.config.load import one_database

    return one_database(profile(args))

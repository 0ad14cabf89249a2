"""The profile a command acts on: its --config, narrowed to one database by --database."""

from __future__ import annotations

import argparse

from outbox_relay.config import Config
from outbox_relay.config.load import load_config, one_database


def profile(args: argparse.Namespace) -> Config:
    """The profile, every database of it unless --database chose one."""
    return load_config(args.config, database=args.database)


def one_profile(args: argparse.Namespace) -> Config:
    """The profile of a command that acts on one database."""
    return one_database(profile(args))

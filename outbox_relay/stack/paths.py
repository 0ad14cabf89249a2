"""Where the local stack keeps its data, logs, state and downloaded jars."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

STACK_DIR_ENV = "RELAY_STACK_DIR"


def repo_root() -> Path:
    """The directory that contains the `outbox_relay` package."""
    return Path(__file__).resolve().parents[2]


def default_stack_dir() -> Path:
    configured = os.environ.get(STACK_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    return repo_root() / ".relay-data" / "stack"


@dataclass(frozen=True)
class StackPaths:
    """The layout of one stack instance; pure path arithmetic, nothing is created."""

    root: Path

    @classmethod
    def resolve(cls, stack_dir: Path | None = None) -> StackPaths:
        root = default_stack_dir() if stack_dir is None else Path(stack_dir).expanduser()
        return cls(root.resolve())

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def lock_file(self) -> Path:
        return self.root / ".lock"

    # Everything PostgreSQL writes lives under one directory so that, when we run
    # as root, a single chown hands it to the unprivileged server user.
    @property
    def pg_root(self) -> Path:
        return self.root / "postgres"

    @property
    def pg_data(self) -> Path:
        return self.pg_root / "data"

    @property
    def pg_log(self) -> Path:
        return self.pg_root / "postgres.log"

    @property
    def pg_socket_dir(self) -> Path:
        return self.pg_root / "run"

    @property
    def kafka_root(self) -> Path:
        return self.root / "kafka"

    @property
    def kafka_data(self) -> Path:
        return self.kafka_root / "data"

    @property
    def kafka_properties(self) -> Path:
        return self.kafka_root / "server.properties"

    @property
    def kafka_log4j(self) -> Path:
        return self.kafka_root / "log4j2.properties"

    @property
    def kafka_log(self) -> Path:
        return self.kafka_root / "server.log"

    @property
    def kafka_console(self) -> Path:
        """stdout/stderr of the JVM: where crashes before log4j is up end up."""
        return self.kafka_root / "console.log"

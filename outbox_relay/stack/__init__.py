"""The local stack: an embedded PostgreSQL and a real Kafka broker as plain processes.

`up()` starts (or finds) both services and waits until they answer; `down()` stops
what `up()` started. Ports and pids live in a JSON state file in the stack dir, so
the CLI and test sessions share one stack. Nothing here runs at import time.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from outbox_relay.launch.cache import file_lock
from outbox_relay.stack import kafka, postgres
from outbox_relay.stack.paths import StackPaths
from outbox_relay.stack.proc import StackError, pick_free_ports, port_is_free, wait_for
from outbox_relay.stack.state import KafkaState, PostgresState, StackState, load_state, save_state

POSTGRES_URL_ENV = "RELAY_POSTGRES_URL"
KAFKA_BOOTSTRAP_ENV = "RELAY_KAFKA_BOOTSTRAP_SERVERS"
POSTGRES_TIMEOUT_S = 60.0
# A cold JVM plus KRaft bootstrap takes ~10 s on a quiet box; leave room for busy CI.
KAFKA_TIMEOUT_S = 120.0
PORT_GRACE_S = 5.0

__all__ = [
    "KAFKA_BOOTSTRAP_ENV",
    "POSTGRES_URL_ENV",
    "StackError",
    "StackInfo",
    "down",
    "start_kafka",
    "start_postgres",
    "status",
    "stop_kafka",
    "stop_postgres",
    "up",
]


@dataclass(frozen=True)
class StackInfo:
    postgres_url: str
    kafka_bootstrap: str

    def env_lines(self) -> list[str]:
        """Shell lines that point the relay at this stack (for `eval "$(...)"`)."""
        return [
            f"export {POSTGRES_URL_ENV}={shlex.quote(self.postgres_url)}",
            f"export {KAFKA_BOOTSTRAP_ENV}={shlex.quote(self.kafka_bootstrap)}",
        ]


def _external(name: str, use_env: bool) -> str | None:
    return (os.environ.get(name) or None) if use_env else None


def _ports_reusable(*ports: int) -> bool:
    """Whether our previous ports can be bound again, allowing a killed process a moment
    to release them before we give up and move to new ports."""
    return wait_for(lambda: all(port_is_free(port) for port in ports), PORT_GRACE_S)


def _launch_postgres(paths: StackPaths, state: StackState) -> PostgresState:
    """Start PostgreSQL unless the state file's server is alive; records the new pid."""
    current = state.postgres
    if current is not None and postgres.is_running(paths, current.pid):
        return current
    # Same port as last time when possible, so URLs handed out earlier stay valid.
    keep = current is not None and _ports_reusable(current.port)
    port = current.port if keep and current is not None else pick_free_ports(1)[0]
    state.postgres = PostgresState(port=port, pid=None)
    save_state(paths.state_file, state)
    state.postgres.pid = postgres.start(paths, port)
    save_state(paths.state_file, state)
    return state.postgres


def _launch_kafka(paths: StackPaths, state: StackState) -> KafkaState:
    """Start the broker unless the state file's broker is alive; records the new pid."""
    current = state.kafka
    if current is not None and kafka.is_running(paths, current.pid):
        return current
    if current is not None and _ports_reusable(current.port, current.controller_port):
        port, controller_port = current.port, current.controller_port
    else:
        port, controller_port = pick_free_ports(2)
    state.kafka = KafkaState(port=port, controller_port=controller_port, pid=None)
    save_state(paths.state_file, state)
    state.kafka.pid = kafka.start(paths, port, controller_port)
    save_state(paths.state_file, state)
    return state.kafka


def _ready_postgres(paths: StackPaths, pg: PostgresState) -> str:
    assert pg.pid is not None
    postgres.wait_ready(paths, pg.port, pg.pid, POSTGRES_TIMEOUT_S)
    return postgres.postgres_url(pg.port)


def _ready_kafka(paths: StackPaths, broker: KafkaState) -> str:
    assert broker.pid is not None
    kafka.wait_ready(paths, broker.port, broker.pid, KAFKA_TIMEOUT_S)
    return kafka.bootstrap_servers(broker.port)


def up(stack_dir: Path | None = None, use_env: bool = True) -> StackInfo:
    """Start whatever is not running and wait until both services answer.

    With `use_env`, a service named by RELAY_POSTGRES_URL / RELAY_KAFKA_BOOTSTRAP_SERVERS
    is used as is and not started. Idempotent and safe to call concurrently.
    """
    paths = StackPaths.resolve(stack_dir)
    external_pg = _external(POSTGRES_URL_ENV, use_env)
    external_kafka = _external(KAFKA_BOOTSTRAP_ENV, use_env)
    with file_lock(paths.lock_file):
        state = load_state(paths.state_file)
        # Launch both before waiting on either, so the JVM boots while Postgres does.
        pg = None if external_pg else _launch_postgres(paths, state)
        broker = None if external_kafka else _launch_kafka(paths, state)
        url = _ready_postgres(paths, pg) if pg else external_pg
        bootstrap = _ready_kafka(paths, broker) if broker else external_kafka
    assert url is not None and bootstrap is not None
    return StackInfo(postgres_url=url, kafka_bootstrap=bootstrap)


def status(stack_dir: Path | None = None, use_env: bool = True) -> StackInfo | None:
    """The stack's addresses if its processes are alive (no network probe), else None."""
    paths = StackPaths.resolve(stack_dir)
    state = load_state(paths.state_file)
    url = _external(POSTGRES_URL_ENV, use_env)
    if url is None and state.postgres and postgres.is_running(paths, state.postgres.pid):
        url = postgres.postgres_url(state.postgres.port)
    bootstrap = _external(KAFKA_BOOTSTRAP_ENV, use_env)
    if bootstrap is None and state.kafka and kafka.is_running(paths, state.kafka.pid):
        bootstrap = kafka.bootstrap_servers(state.kafka.port)
    if url is None or bootstrap is None:
        return None
    return StackInfo(postgres_url=url, kafka_bootstrap=bootstrap)


def start_postgres(stack_dir: Path | None = None) -> str:
    """(Re)start this stack's PostgreSQL, on its previous port when free; returns the URL."""
    paths = StackPaths.resolve(stack_dir)
    with file_lock(paths.lock_file):
        state = load_state(paths.state_file)
        return _ready_postgres(paths, _launch_postgres(paths, state))


def stop_postgres(stack_dir: Path | None = None, hard: bool = False) -> None:
    """Stop this stack's PostgreSQL; `hard` is an immediate (crash-like) shutdown."""
    paths = StackPaths.resolve(stack_dir)
    with file_lock(paths.lock_file):
        state = load_state(paths.state_file)
        if state.postgres is None:
            return
        postgres.stop(paths, state.postgres.pid, hard=hard)
        state.postgres.pid = None
        save_state(paths.state_file, state)


def start_kafka(stack_dir: Path | None = None) -> str:
    """(Re)start this stack's broker, on its previous ports when free; returns bootstrap."""
    paths = StackPaths.resolve(stack_dir)
    with file_lock(paths.lock_file):
        state = load_state(paths.state_file)
        return _ready_kafka(paths, _launch_kafka(paths, state))


def stop_kafka(stack_dir: Path | None = None, hard: bool = False) -> None:
    """Stop this stack's broker: SIGTERM (then SIGKILL), or straight SIGKILL if `hard`."""
    paths = StackPaths.resolve(stack_dir)
    with file_lock(paths.lock_file):
        state = load_state(paths.state_file)
        if state.kafka is None:
            return
        kafka.stop(paths, state.kafka.pid, hard=hard)
        state.kafka.pid = None
        save_state(paths.state_file, state)


def down(stack_dir: Path | None = None) -> None:
    """Stop both services if this stack started them; ports stay reserved in the state."""
    paths = StackPaths.resolve(stack_dir)
    if not paths.state_file.exists():
        return
    with file_lock(paths.lock_file):
        stop_kafka(paths.root)
        stop_postgres(paths.root)

"""The local profile finds the running local stack by itself (outbox_relay.config.local_stack):
conf/local.toml names its addresses as "local-stack", which loading resolves through the
stack's state file (RELAY_STACK_DIR chooses the stack); an address in the environment still
wins, and with no stack running the one line says how to start one. No network: the
running stack is stood in for by its status."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import outbox_relay.stack
from outbox_relay.config.load import build_config, load_config
from outbox_relay.errors import RelayError
from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from tests.bundle import REPO

LOCAL = REPO / "conf" / "local.toml"
RUNNING = StackInfo(postgres_url="postgresql://postgres@127.0.0.1:41234/postgres",
                    kafka_bootstrap="127.0.0.1:41235")


@pytest.fixture
def no_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stack dir that never held a stack."""
    monkeypatch.setenv("RELAY_STACK_DIR", str(tmp_path / "stack"))
    return tmp_path / "stack"


def test_the_local_profile_names_the_local_stack() -> None:
    profile = tomllib.loads(LOCAL.read_text(encoding="utf-8"))
    assert profile["postgres"]["url"] == "local-stack"
    assert profile["kafka"]["bootstrap_servers"] == "local-stack"


def test_the_running_stack_gives_the_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[bool] = []

    def status(stack_dir: Path | None = None, use_env: bool = True) -> StackInfo:
        asked.append(use_env)
        return RUNNING

    monkeypatch.setattr(outbox_relay.stack, "status", status)
    config = load_config(LOCAL, env={})
    assert config.postgres.url == RUNNING.postgres_url
    assert config.kafka.bootstrap_servers == RUNNING.kafka_bootstrap
    assert asked == [False], "the profile's own lookup: the environment was already laid over"


@pytest.mark.parametrize("env", [
    {"RELAY_POSTGRES_URL": "postgresql://app@db:5432/app",
     "RELAY_KAFKA_BOOTSTRAP_SERVERS": "kafka:9092"},
    {"RELAY_POSTGRES__URL": "postgresql://app@db:5432/app",
     "RELAY_KAFKA__BOOTSTRAP_SERVERS": "kafka:9092"},
])
def test_an_address_in_the_environment_wins_and_needs_no_stack(
    env: dict[str, str], no_stack: Path
) -> None:
    config = load_config(LOCAL, env=env)
    assert (config.postgres.url, config.kafka.bootstrap_servers) == (
        "postgresql://app@db:5432/app", "kafka:9092")


def test_without_a_running_stack_one_line_names_the_command_that_starts_it(
    no_stack: Path,
) -> None:
    with pytest.raises(RelayError) as caught:
        load_config(LOCAL, env={})
    message = str(caught.value)
    print(message)
    assert caught.value.exit_code == ExitCode.NOT_FOUND
    assert "\n" not in message
    assert "`outbox-relay stack up`" in message and str(no_stack) in message
    assert "postgres.url" in message and "RELAY_POSTGRES_URL" in message


def test_one_address_from_the_environment_still_needs_the_stack_for_the_other(
    no_stack: Path,
) -> None:
    with pytest.raises(RelayError, match=r"kafka\.bootstrap_servers"):
        load_config(LOCAL, env={"RELAY_POSTGRES_URL": "postgresql://app@db:5432/app"})


def test_explicit_addresses_and_the_defaults_never_look_for_a_stack(no_stack: Path) -> None:
    explicit = {"postgres": {"url": "postgresql://app@db:5432/app"},
                "kafka": {"bootstrap_servers": "kafka:9092"}}
    assert build_config(explicit, env={}).postgres.host == "db"
    assert build_config({}, env={}).kafka.bootstrap_servers == "127.0.0.1:9092"
    assert not no_stack.exists()

"""The global options (--config, --log-level, --log-format) before or after any sub-command,
as users type them, the value given last winning; and RELAY_CONFIG for the CLI and for
jobs/relay.py (outbox_relay.app's parser) alike."""

from __future__ import annotations

import argparse

import pytest

from outbox_relay.app import parser as relay_parser
from outbox_relay.cli import build_parser, run_argv

# Every leaf sub-command, with the arguments it needs.
COMMANDS = [
    ["run"], ["run", "--available-now"], ["demo"], ["migrate"], ["packages"], ["jars"],
    ["status"], ["metrics", "serve"], ["topics"], ["topics", "retry", "t"],
    ["topics", "unlock", "t"], ["parked", "list"], ["parked", "requeue", "1"],
    ["parked", "drop", "1"], ["skip", "1"], ["peek", "--topic", "t"],
    ["ledger", "show", "--id", "1"], ["ledger", "flush"], ["ledger", "maintain"],
    ["stack", "up"], ["stack", "down"], ["stack", "env"],
]
GLOBAL = ["--config", "p.toml", "--log-level", "debug", "--log-format", "json"]


def _global(args: argparse.Namespace) -> tuple[str | None, str, str]:
    return args.config, args.log_level, args.log_format


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RELAY_CONFIG", "RELAY_LOG_LEVEL", "RELAY_LOG_FORMAT"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_global_options_before_or_after_the_sub_command_mean_the_same(
    command: list[str],
) -> None:
    before = build_parser().parse_args([*GLOBAL, *command])
    after = build_parser().parse_args([*command, *GLOBAL])
    assert _global(before) == _global(after) == ("p.toml", "debug", "json")
    assert {k: v for k, v in vars(before).items() if k != "fn"} == {
        k: v for k, v in vars(after).items() if k != "fn"}


def test_nothing_given_leaves_the_defaults() -> None:
    assert _global(build_parser().parse_args(["status"])) == (None, "INFO", "text")
    assert _global(relay_parser().parse_args([])) == (None, "INFO", "text")


def test_the_value_given_last_wins() -> None:
    args = build_parser().parse_args(["--config", "a.toml", "run", "--config", "b.toml"])
    assert args.config == "b.toml"
    args = build_parser().parse_args(["--log-level", "debug", "ledger", "show", "--id", "1",
                                      "--log-level", "warning"])
    assert args.log_level == "warning"


def test_run_hands_options_given_after_it_to_the_relay() -> None:
    """`outbox-relay run --config conf/local.toml` was a usage error, and the run then
    used the built-in defaults."""
    cli = build_parser().parse_args(["run", "--config", "conf/local.toml", "--available-now",
                                     "--log-format", "json"])
    relay = relay_parser().parse_args(run_argv(cli))
    assert (relay.config, relay.available_now, relay.log_format) == (
        "conf/local.toml", True, "json")


def test_relay_config_names_the_profile_of_the_cli_and_of_jobs_relay_py(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RELAY_CONFIG", "conf/local.toml")
    assert build_parser().parse_args(["status"]).config == "conf/local.toml"
    assert relay_parser().parse_args(["--available-now"]).config == "conf/local.toml"
    assert relay_parser().parse_args(["--config", "other.toml"]).config == "other.toml"
    assert build_parser().parse_args(["status", "--config", "other.toml"]).config == "other.toml"


def test_each_place_gives_the_same_help() -> None:
    def helps(parser: argparse.ArgumentParser) -> dict[str, str | None]:
        return {a.dest: a.help for a in parser._actions if a.dest in ("config", "log_level",
                                                                        "log_format")}

    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    assert len(helps(top)) == 3
    for name, command in sub.choices.items():
        assert helps(command) == helps(top), name
    assert helps(relay_parser()) == helps(top)


@pytest.mark.parametrize("argv", [["status", "--log-level", "loud"],
                                  ["run", "--log-format", "xml"]])
def test_a_bad_log_option_is_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 2

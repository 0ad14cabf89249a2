"""`outbox-relay run` hands the relay's own options to the relay's own parser."""

from __future__ import annotations

import pytest

from outbox_relay.app import parser
from outbox_relay.cli import build_parser, run_argv


@pytest.mark.parametrize(
    ("argv", "available_now", "log_level"),
    [
        (["--config", "p.toml", "run", "--available-now"], True, None),
        (["--config", "p.toml", "run"], False, None),
        (["--config", "p.toml", "run", "--log-level", "debug", "--available-now"], True, "debug"),
    ],
)
def test_run_forwards_its_options_to_the_relay(
    argv: list[str], available_now: bool, log_level: str | None
) -> None:
    relay_args = parser().parse_args(run_argv(build_parser().parse_args(argv)))
    assert relay_args.config == "p.toml"
    assert relay_args.available_now is available_now
    if log_level:
        assert relay_args.log_level == log_level


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_run_forwards_the_log_format(log_format: str) -> None:
    argv = ["--config", "p.toml", "run", "--log-format", log_format]
    relay_args = parser().parse_args(run_argv(build_parser().parse_args(argv)))
    assert relay_args.log_format == log_format


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["run", "--log-format", "xml"])
    assert exc.value.code == 2

"""A drain's time budget without Spark: the flag and the profile key, the stop it sets, and
the summary's lines. The drain itself: tests/integration/test_drain_budget.py."""

from __future__ import annotations

import argparse
import time

import pytest

from outbox_relay.app import _with_time_budget, main, parser, print_summary
from outbox_relay.cli import build_parser, run_argv
from outbox_relay.config import Config
from outbox_relay.config.load import build_config
from outbox_relay.control.pending import TopicState
from outbox_relay.errors import ConfigError
from outbox_relay.exit_codes import ExitCode
from outbox_relay.stream.budget import TimeBudget, budget_seconds, describe
from outbox_relay.stream.runner import RunResult, _exit_code
from outbox_relay.stream.stats import RelayStats
from outbox_relay.stream.stop import StopSignal


@pytest.mark.parametrize("text", ["0", "-5", "inf", "nan", "ten"])
def test_a_budget_that_is_no_positive_number_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="seconds > 0"):
        budget_seconds(text)
    with pytest.raises(ConfigError, match=r"relay\.available_now_budget_s"):
        build_config({"relay": {"available_now_budget_s": text}}, env={})


def test_the_flag_reaches_the_relay_from_the_cli_and_wins_over_the_profile() -> None:
    args = build_parser().parse_args(["run", "--available-now", "--time-budget-s", "420"])
    relay_args = parser().parse_args(run_argv(args))
    assert relay_args.time_budget_s == 420.0
    profile = build_config({"relay": {"available_now_budget_s": 300}}, env={})
    assert _with_time_budget(profile, relay_args.time_budget_s).relay.available_now_budget_s == 420
    assert _with_time_budget(profile, None) is profile
    assert Config().relay.available_now_budget_s is None  # unset: no budget


def test_the_flag_without_available_now_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--time-budget-s", "60"])
    assert exc.value.code == ExitCode.USAGE
    assert "--time-budget-s bounds a drain: it needs --available-now" in capsys.readouterr().err


def test_a_spent_budget_stops_everything_but_is_no_interruption() -> None:
    stop = StopSignal()
    TimeBudget(0.05, time.monotonic(), stop)
    assert stop.wait(5), "the budget never set the stop flag"
    assert stop.ran_out
    left = [TopicState("t", "ready", None, None, 0, 0.0, True)]
    assert not stop.interrupted
    assert _exit_code(True, stop.interrupted, False, left) == ExitCode.LEFT_OVER
    # A stop signal after the budget is a first signal (graceful), and the run is then
    # an interrupted one.
    stop.request("SIGTERM")
    assert not stop.ran_out and stop.interrupted
    assert _exit_code(True, stop.interrupted, False, left) == ExitCode.INTERRUPTED


def test_a_budget_counts_from_the_start_it_is_given_and_a_cancelled_one_never_fires() -> None:
    spent = StopSignal()
    TimeBudget(30, time.monotonic() - 31, spent)  # the session's start-up took it all
    assert spent.wait(5) and spent.ran_out
    cancelled = StopSignal()
    TimeBudget(0.2, time.monotonic(), cancelled).cancel()
    none = StopSignal()
    TimeBudget(None, time.monotonic() - 10**6, none)
    assert not cancelled.wait(0.5) and not none.requested


def test_the_summary_says_the_budget_ran_out_on_each_topic_left(
    capsys: pytest.CaptureFixture[str],
) -> None:
    left = [TopicState("a", "ready", None, None, 0, 0.0, True),
            TopicState("b", "locked", "other@host", None, 0, 0.0, True)]
    print_summary(RunResult(ExitCode.LEFT_OVER, RelayStats(), 61.0, left,
                            out_of_time=describe(60)))
    lines = capsys.readouterr().out.splitlines()[1:]
    assert lines == [
        "left over: topic a: not drained (the time budget of 60 s ran out)",
        "left over: topic b: locked by other@host (the time budget of 60 s ran out)",
    ]

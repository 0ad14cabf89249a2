"""One table of exit codes: every error class and command outcome has a code of its own,
every code one outcome for every runner, and docs/exit-codes.md prints exactly that
table."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from outbox_relay import errors
from outbox_relay.exit_codes import ExitCode, Outcome, markdown_table, outcome_of

PAGE = Path(__file__).resolve().parents[2] / "docs" / "exit-codes.md"


def test_every_error_class_has_a_code_of_its_own() -> None:
    # The publisher's errors are raised inside applications, never as a command's exit.
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, errors.RelayError) and not issubclass(c, errors.PublishError)]
    codes = {c.__name__: c.exit_code for c in classes}
    assert all(isinstance(code, ExitCode) for code in codes.values()), codes
    assert len(set(codes.values())) == len(codes), f"two error classes share a code: {codes}"
    assert ExitCode.LEFT_OVER not in codes.values(), "1 means topics left over, nothing else"
    assert ExitCode.OK not in codes.values()


def test_every_code_has_a_meaning_and_a_distinct_number() -> None:
    assert len({int(c) for c in ExitCode}) == len(ExitCode)
    assert all(c.meaning.strip() for c in ExitCode)


def test_every_code_has_an_outcome() -> None:
    assert all(isinstance(code.outcome, Outcome) for code in ExitCode)
    assert {c for c in ExitCode if c.outcome is Outcome.SUCCESS} == {ExitCode.OK}
    assert {c for c in ExitCode if c.outcome is Outcome.WARN} == {ExitCode.LEFT_OVER}


@pytest.mark.parametrize("status", [-9, -15, 1 + max(ExitCode), 137, 143, 255])
def test_a_status_outside_the_table_is_retried(status: int) -> None:
    """A signal's status, spark-submit's 143 on a TERM before the relay runs, a JVM crash."""
    assert outcome_of(status) is Outcome.RETRY


def test_the_docs_print_the_table() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert markdown_table() in page
    for code in ExitCode:
        assert f"| {int(code)} | `{code.name}` |" in page


def test_the_docs_state_each_outcome_and_the_fail_codes_for_each_runner() -> None:
    """The FAIL codes as systemd and Kubernetes take them, printed from the table."""
    page = PAGE.read_text(encoding="utf-8")
    fail = [int(c) for c in ExitCode if c.outcome is Outcome.FAIL]

    for outcome in Outcome:
        assert f"| `{outcome.name}` | {outcome.value} |" in page
    assert f"`RestartPreventExitStatus={' '.join(map(str, fail))}`" in page
    assert f"values: [{', '.join(map(str, fail))}]}}" in page


def test_an_unverified_drain_is_not_a_success() -> None:
    from outbox_relay.stream.runner import _exit_code

    assert _exit_code(True, False, False, [], verified=False) == ExitCode.NOT_VERIFIED
    assert _exit_code(True, True, False, [], verified=False) == ExitCode.NOT_VERIFIED
    assert _exit_code(False, False, False, [], verified=False) == ExitCode.OK


class _Py4JLike(Exception):
    """An error of the JVM's bridge, as py4j raises it (matched by its module)."""


_Py4JLike.__module__ = "py4j.protocol"


@pytest.mark.parametrize(("failure", "code"), [
    (errors.DatabaseError("syntax error at or near"), ExitCode.DATABASE_ERROR),
    (errors.DatabaseUnavailableError("server closed the connection"), ExitCode.DATABASE_LOST),
    (errors.LockLostError("lost"), ExitCode.LOCK_LOST),
    (errors.UnreachableError("Kafka"), ExitCode.UNREACHABLE),
    (TypeError("unsupported operand"), ExitCode.DEFECT),
    (KeyError("topic"), ExitCode.DEFECT),
    (_Py4JLike("An error occurred while calling o123.save"), ExitCode.QUERY_FAILED),
], ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v.name)
def test_a_failed_batch_body_exits_with_its_causes_code(failure: BaseException,
                                                        code: ExitCode) -> None:
    """Spark hands the body's exception back wrapped in a StreamingQueryException whose
    text is all that is left; the runner maps from the body's own exception instead."""
    from outbox_relay.stream.runner import _exit_code

    for available_now in (True, False):
        assert _exit_code(available_now, False, True, [], failure=failure) == code
    assert errors.exit_code_for(failure) == code


def test_a_query_that_failed_outside_a_body_exits_query_failed() -> None:
    from outbox_relay.stream.runner import _exit_code

    assert _exit_code(True, False, True, []) == ExitCode.QUERY_FAILED


def test_a_command_and_a_run_map_errors_in_one_place(capsys: pytest.CaptureFixture[str]) -> None:
    for exc in (errors.DatabaseError("x"), TypeError("y"), _Py4JLike("z")):
        try:
            raise exc
        except Exception as caught:
            assert errors.exit_code_of(caught) == errors.exit_code_for(caught)
    assert "TypeError: y" in capsys.readouterr().err, "a defect prints its traceback"


def test_a_stack_failure_is_an_error_of_the_relay_with_its_own_code(
        capsys: pytest.CaptureFixture[str]) -> None:
    from outbox_relay.stack.proc import StackError

    exc = StackError("PostgreSQL did not start")
    assert isinstance(exc, errors.RelayError)
    assert errors.exit_code_for(exc) == ExitCode.STACK_FAILED
    assert errors.exit_code_of(exc) == ExitCode.STACK_FAILED
    assert capsys.readouterr().err == "outbox-relay: PostgreSQL did not start\n"


def test_the_logged_report_maps_like_the_printed_one(caplog: pytest.LogCaptureFixture) -> None:
    """JSON logs hold the report as a record; its code comes from the same mapping."""
    import logging

    from outbox_relay.stack.proc import StackError

    log = logging.getLogger("outbox_relay.test")
    for exc in (errors.DatabaseError("x"), StackError("s"), TypeError("y"), _Py4JLike("z")):
        with caplog.at_level(logging.ERROR, logger="outbox_relay.test"):
            assert errors.logged_exit_code(exc, log) == errors.exit_code_for(exc)
    messages = [r.getMessage() for r in caplog.records]
    assert messages[:2] == ["outbox-relay: x", "outbox-relay: s"]
    assert caplog.records[2].exc_info is not None, "a defect logs its traceback"

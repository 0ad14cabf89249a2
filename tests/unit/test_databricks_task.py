"""The Databricks task's entry point follows the one exit-code policy: a success returns,
a warning returns after one line in the task's log, a failure raises (the task's retries
then run, whatever its outcome: docs/exit-codes.md says why). Commands that really exit
with each class of code; tests/integration/test_databricks_task_status.py runs those that need
the local stack (`status`, a drain that leaves a topic over)."""

from __future__ import annotations

from pathlib import Path

import pytest

from outbox_relay.databricks_task import TaskFailed, main
from outbox_relay.exit_codes import ExitCode, Outcome


def test_a_success_returns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["packages"]) is None
    assert "warning" not in capsys.readouterr().err


def test_an_invalid_profile_fails_the_task_as_not_retryable(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[relay]\nno_such_setting = 1\n", encoding="utf-8")

    with pytest.raises(TaskFailed) as failed:
        main(["--config", str(bad), "run"])

    assert (failed.value.code, failed.value.outcome) == (ExitCode.USAGE, Outcome.FAIL)
    assert str(failed.value).startswith("outbox-relay exited with 2 (USAGE: ")
    assert Outcome.FAIL.value in str(failed.value)


"""The Databricks task's entry point on commands that reach the local stack, called in
this process as Databricks' wheel launcher calls it: `status` on a reachable database
succeeds, on an unreachable one fails as retryable. The drain that leaves a topic over
(a success with a warning) runs under spark-submit in test_databricks_drain.py; the
codes that need no database, in tests/unit/test_databricks_task.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from outbox_relay.databricks_task import TaskFailed, main
from outbox_relay.exit_codes import ExitCode, Outcome
from tests.integration.conftest import ConfigFactory
from tests.integration.process import write_profile

pytestmark = pytest.mark.integration


def test_status_on_a_reachable_database_returns(make_config: ConfigFactory, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    profile = write_profile(make_config(), tmp_path / "profile.toml")

    assert main(["--config", str(profile), "status", "--no-delta"]) is None
    assert "outbox-relay-task:" not in capsys.readouterr().err


def test_status_on_an_unreachable_database_fails_as_retryable(make_config: ConfigFactory,
                                                              tmp_path: Path) -> None:
    # Port 1 of the loopback: nothing listens there, the connection is refused at once.
    config = make_config(postgres={"url": "postgresql://relay@127.0.0.1:1/outbox"})
    profile = write_profile(config, tmp_path / "profile.toml")

    with pytest.raises(TaskFailed) as failed:
        main(["--config", str(profile), "status", "--no-delta"])

    assert (failed.value.code, failed.value.outcome) == (ExitCode.UNREACHABLE, Outcome.RETRY)
    assert str(failed.value).startswith("outbox-relay exited with 4 (UNREACHABLE: ")

"""The job scripts run also when their runner executes the file's text without `__file__`
(as reported of Databricks' Python file tasks); the package then comes from the wheel."""

from __future__ import annotations

import pytest

from tests.bundle import REPO


@pytest.mark.parametrize("script", ["relay.py", "migrate.py"])
def test_a_job_script_runs_without_its_file_name(
    script: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = (REPO / "jobs" / script).read_text(encoding="utf-8")
    monkeypatch.setattr("sys.argv", [script, "--help"])
    with pytest.raises(SystemExit) as ended:
        exec(compile(source, f"<{script}>", "exec"), {"__name__": "__main__"})
    assert ended.value.code == 0

"""`make test` leaves the tree as it found it: the fault tier writes its figures under a
git-ignored path, and only `make faults-report` copies them into the tracked reports/."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.faults import report

REPO = Path(__file__).resolve().parents[2]


def test_the_fault_report_of_a_test_run_goes_to_a_git_ignored_path() -> None:
    run_files = [p.relative_to(REPO).as_posix() for p in report.run_paths()]
    assert all(not f.startswith("reports/") for f in run_files), run_files
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *run_files], cwd=REPO,
                             capture_output=True, text=True, check=False)
    assert ignored.stdout.split() == run_files, ".gitignore must cover " + str(run_files)
    tracked = [p.relative_to(REPO).as_posix() for p in report.tracked_paths()]
    assert tracked == ["reports/faults.json", "reports/faults.md"]


def test_make_faults_report_runs_both_tiers_afresh_and_publishes_their_figures() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\nfaults-report:", 1)[1].split("\n\n", 1)[0]
    steps = [line.strip() for line in recipe.splitlines()[1:]]
    assert steps == ["$(PY) -m tests.faults.report clear",
                     '$(PY) -m pytest tests/faults tests/cluster -m "faults or cluster" '
                     "$(FAULTS_ARGS)",
                     "$(PY) -m tests.faults.report publish"], steps


def test_a_scenario_is_recorded_for_the_run_and_published_only_on_purpose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(report, "RUN_DIR", tmp_path / "run")
    monkeypatch.setattr(report, "TRACKED_DIR", tmp_path / "reports")
    report.record("01-kill-loop", {"mode": "quick", "status": "passed", "lost": 0})
    assert [p.exists() for p in report.run_paths()] == [True, True]
    assert not report.TRACKED_DIR.exists()

    assert report.publish() == report.tracked_paths()
    data = json.loads(report.tracked_paths()[0].read_text(encoding="utf-8"))
    assert list(data["scenarios"]) == ["01-kill-loop"]
    assert "01-kill-loop (quick)" in report.tracked_paths()[1].read_text(encoding="utf-8")
    report.clear()
    assert not any(p.exists() for p in report.run_paths())
    with pytest.raises(SystemExit, match="no fault report"):
        report.publish()

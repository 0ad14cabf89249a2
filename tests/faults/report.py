"""The suite's figures: faults.json (merged scenario by scenario) and faults.md.

A test run writes them under the git-ignored .relay-data/reports/, so that `make test`
leaves the tree as it found it. The tracked copies in reports/ change only on purpose:
`make faults-report` clears the run's report, runs the fault and cluster tiers, and
publishes the result (`python -m tests.faults.report clear|publish`).
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RUN_DIR = REPO / ".relay-data" / "reports"
TRACKED_DIR = REPO / "reports"
NAMES = ("faults.json", "faults.md")

COLUMNS = (
    ("scenario", "scenario"),
    ("status", "result"),
    ("faults_injected", "faults injected"),
    ("written", "written"),
    ("delivered", "delivered"),
    ("duplicated", "duplicated"),
    ("lost", "lost"),
    ("worst_key_order_violations", "worst per-key order violations"),
    ("drain_s", "time to drain (s)"),
    ("restart_to_oldest_delivered_s", "time to resume after a crash (s)"),
)


def run_paths() -> list[Path]:
    """Where a test run writes: (json, md)."""
    return [RUN_DIR / name for name in NAMES]


def tracked_paths() -> list[Path]:
    """The report kept in git: (json, md)."""
    return [TRACKED_DIR / name for name in NAMES]


def clear() -> None:
    """Forgets the run's scenarios, so that the next run's report holds its own alone."""
    for path in run_paths():
        path.unlink(missing_ok=True)


def publish() -> list[Path]:
    """Copies the run's report over the tracked one; returns what it wrote."""
    if not all(p.exists() for p in run_paths()):
        raise SystemExit(f"no fault report in {RUN_DIR} to publish: run the fault tier first")
    TRACKED_DIR.mkdir(exist_ok=True)
    for source, target in zip(run_paths(), tracked_paths(), strict=True):
        shutil.copyfile(source, target)
    return tracked_paths()


def load() -> dict[str, Any]:
    try:
        data = json.loads(run_paths()[0].read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    data.setdefault("scenarios", {})
    return data


def record(key: str, figures: dict[str, Any]) -> None:
    """Merge one scenario's figures into the report; other scenarios keep theirs."""
    data = load()
    data["description"] = (
        "Fault-injection suite (tests/faults): real spark-submit relays, a real Kafka "
        "broker and PostgreSQL, checked by an independent consumer against the ids written."
    )
    data["machine"] = {"cpus": _cpus(), "python": platform.python_version()}
    data["scenarios"][key] = {**figures, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                      time.gmtime())}
    data["scenarios"] = dict(sorted(data["scenarios"].items(), key=lambda kv: _order(kv[0])))
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    json_path, md_path = run_paths()
    json_path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    md_path.write_text(markdown(data), encoding="utf-8")


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def _order(key: str) -> tuple[int, str]:
    head = key.split("-", 1)[0]
    return (int(head), key) if head.isdigit() else (99, key)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# Fault-injection figures",
        "",
        "Written by `tests/faults` and, for the `10-cluster` rows, `tests/cluster` (see",
        "docs/fault-tests.md); the numbers of the last",
        "run of each scenario, details in `faults.json`. *Delivered* counts distinct",
        "messages a fresh consumer read; *duplicated* counts the extra copies; *lost* are",
        "messages written but never delivered (must be 0). Order violations count messages",
        "whose first appearance came before one of a transaction that had committed before",
        "theirs began, on the same topic and key: 0 everywhere, except on a topic whose",
        "poison only the broker refuses, where they are measured and bounded by one claim",
        "(docs/design.md, invariant 2, per-key order). Time to drain runs from the first",
        "relay start to an empty outbox, JVM start-ups and outages included. Time to resume",
        "runs from the restart of a killed relay to the delivery of the oldest message that",
        "was waiting, the new process's JVM and Spark start-up included.",
        "",
        "| " + " | ".join(title for _, title in COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    total = 0.0
    for key, s in data["scenarios"].items():
        row = {**s, "scenario": f"{key} ({s.get('mode', 'quick')})"}
        lines.append("| " + " | ".join(_cell(row.get(k)) for k, _ in COLUMNS) + " |")
        total += float(s.get("test_s") or 0) + float(s.get("setup_s") or 0)
    lines += ["", f"Wall time of these scenarios: {total / 60:.1f} min on "
              f"{data.get('machine', {}).get('cpus', '?')} cores.", ""]
    notes = [(k, s["notes"]) for k, s in data["scenarios"].items() if s.get("notes")]
    if notes:
        lines += ["Notes:", ""]
        lines += [f"- **{k}**: {n}" for k, n in notes]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv == ["clear"]:
        clear()
    elif argv == ["publish"]:
        for path in publish():
            print(f"published {path.relative_to(REPO)}")
    else:
        print("usage: python -m tests.faults.report clear|publish", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

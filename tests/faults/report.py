"""The suite's figures: reports/faults.json (merged scenario by scenario) and faults.md."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

REPORTS = Path(__file__).resolve().parents[2] / "reports"
JSON_PATH = REPORTS / "faults.json"
MD_PATH = REPORTS / "faults.md"

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


def load() -> dict[str, Any]:
    try:
        data = json.loads(JSON_PATH.read_text(encoding="utf-8"))
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
    REPORTS.mkdir(exist_ok=True)
    JSON_PATH.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    MD_PATH.write_text(markdown(data), encoding="utf-8")


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

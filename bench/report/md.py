"""reports/bench-default.md: the targets, what the misses measured, then each part's
figures for every contender; reports/bench-default.json holds all of it."""

from __future__ import annotations

import json
from pathlib import Path

from bench.report.targets import (
    Results,
    dig,
    kinds,
    lanes,
    late,
    num,
    plan_name,
    rounds,
    rows,
    startup,
)

DRAINS = (("W1", "W1, the table with a history"), ("W1V", "W1, the table in id order"),
          ("W3", "W3, 1,000 new topics x 100"), ("DRAIN", "scheduled drain, 1,000 messages"))


def write(results: Results, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench-default.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "bench-default.md").write_text(markdown(results))


def markdown(results: Results) -> str:
    meta = results["meta"]
    lines = ["# Benchmark, default run (the shipped profile, conf/local.toml)", ""]
    if meta.get("quick"):
        lines += ["> **Quick run**: a check of the benchmark at a tiny scale, in a scratch "
                  "database; its figures are not the targets' figures.", ""]
    quiet = meta.get("quiet_check", {})
    if quiet.get("forced"):
        # The first line of each reason: the rival processes' list is in the .json.
        why = "; ".join(r.split("\n")[0] for r in quiet.get("why_forced", []))
        lines += [f"> **Forced** on a machine that was not quiet: {why}.", ""]
    lines += [f"Started {meta['started']}, ended {meta.get('ended', '?')} "
              f"({num(meta.get('duration_s'))} s), git `{meta['git']}`"
              f"{' with uncommitted changes' if meta.get('dirty') else ''}, "
              f"{meta['machine']['cores']} cores; load average at the start "
              f"{results.get('load_start')}, at the end {results.get('load_end')}. Each part's "
              f"seconds: {results.get('parts_s')}."
              + (f" **Failed: {', '.join(meta['failures'])}.**" if meta.get("failures") else ""),
              "", "| target | bound | figure | beside it, same run | met |",
              "| --- | --- | --- | --- | --- |"]
    got = rows(results)
    for row in got:
        met = {True: "yes", False: "**no**", None: "-"}[row["met"]]
        figure = row["figure"] if isinstance(row["figure"], str) else num(row["figure"])
        lines.append(f"| {row['target']} | {row['bound']} | {figure} | {row['beside']} | {met} |")
    missed = [row for row in got if row["met"] is False]
    if missed:
        lines += ["", "## What the misses measured", ""]
        lines += [f"- **{row['target']}**: {row['why']}." for row in missed]
    return "\n".join(lines + _drains(results) + _latency(results) + _first(results)) + "\n"


def _drains(results: Results) -> list[str]:
    if not any(key in results for key, _ in DRAINS):
        return []
    lines = ["", "## Drains", "",
             "Seconds after launch; the drain is first record to last. CPU per 1,000 "
             "messages: the contender's own processes, then the whole machine.", "",
             "| part | contender | first record | last record | exit (code) | msg/s | "
             "CPU s / 1,000 | read back: distinct, duplicates, inversions | left | lanes, "
             "or the peer's select |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- "
             "| --- |"]
    for key, title in DRAINS:
        for who in ("relay", "peer"):
            r = dig(results, key, who)
            if not r:
                continue
            capped = f", capped at {r['capped_at_s']:.0f} s" if r.get("capped_at_s") else ""
            note = lanes(r) if who == "relay" else plan_name(r)
            lines.append(
                f"| {title} | {who} | {num(r.get('first_record_s'))} | "
                f"{num(r.get('last_record_s'))}{capped} | {num(r.get('exit_s'))} "
                f"({r.get('exit_code')}) | {num(r.get('msgs_per_s'))} | "
                f"{num(r.get('cpu_tree_s_per_1k'))} / {num(r.get('cpu_machine_s_per_1k'))} | "
                f"{num(r.get('distinct'))}, {num(r.get('duplicates'))}, "
                f"{num(r.get('inversions'))} | {num(r.get('outbox_left'))} | {note} |")
    return lines


def _latency(results: Results) -> list[str]:
    if not {"LAT1000", "LAT500"} & set(results):
        return []
    lines = ["", "## Latency on a new topic", "",
             "Windows by commit time, in seconds after launch; CPU of the relay's processes "
             "over the window.", "",
             "| case | window | messages | missing | p50 s | p99 s | max s | cores | "
             "CPU s / 1,000 |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    notes = []
    for case in ("LAT1000", "LAT500"):
        r = results.get(case)
        if not r:
            continue
        for window in ("first_minute", "steady"):
            w = r.get(window)
            if w:
                lines.append(f"| {case} | {window} | {num(w['n'])} | {num(w['missing'])} | "
                             f"{num(w['p50_s'])} | {num(w['p99_s'])} | {num(w['max_s'])} | "
                             f"{num(w['cores'])} | {num(w['cpu_s_per_1k'])} |")
        windows = "; ".join(f"{w}: {late(r, w)}" for w in ("first_minute", "steady")
                            if r.get(w))
        idle = dig(r, "idle")
        notes.append(f"- {case}: first record {num(r.get('first_record_s'), ' s')} after "
                     f"launch; {windows}; peak memory {num(dig(r, 'memory', 'peak_gb'), ' GB')}"
                     f" ({kinds(dig(r, 'memory', 'by_kind_mb'), ' MB')})"
                     + (f"; idle {num(idle['cores'], ' cores')} ({kinds(idle['by_kind'], '')})"
                        if idle else "")
                     + f"; {rounds(r)}; exit code {r.get('exit_code')}.")
    return [*lines, "", *notes]


def _first(results: Results) -> list[str]:
    if not {"FIRST", "DRAIN", "LAT1000"} & set(results):
        return []
    lines = ["", "## Start-up", ""]
    for path, until, title in ((("FIRST", "relay"), "first_record_s", "Launch to the first record"),
                               (("LAT1000",), "first_record_s", "1,000 msg/s on a new topic"),
                               (("DRAIN", "relay"), "exit_s", "The scheduled drain")):
        relay = dig(results, *path)
        if relay:
            lines.append(f"- {title} (the relay's debug marks, seconds): "
                         f"{startup(relay, until)}.")
    first = results.get("FIRST") or {}
    for who, r in first.items():
        lines.append(f"- FIRST, {who}: first record {num(r.get('first_record_s'), ' s')}, all "
                     f"1,000 {num(r.get('all_records_s'), ' s')} after launch; read back "
                     f"{num(r.get('distinct'))}, {num(r.get('duplicates'))} duplicates; exit "
                     f"code {r.get('exit_code')}.")
    return lines

"""The report's PNG plots: throughput and latency overview, W1 progress, W2 latency
distribution, W4 memory, and the W2 rate curve of both contenders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common import (
    KAFKA_LIMIT,
    PEER,
    PEER_BATCH,
    PG_LIMIT,
    PIPELINE_LIMIT,
    RELAY,
)
from bench.report.figures import by_name


def plots(results: dict[str, Any], out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: list[str] = []
    w = results["summary"]
    quick = " (quick)" if results["meta"]["quick"] else ""

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    ax = axes[0]
    groups = [k for k in ("W1", "W3") if k in w]
    names = [RELAY, PEER, PEER_BATCH, PG_LIMIT, KAFKA_LIMIT, PIPELINE_LIMIT]
    colors = ["#1f77b4", "#d62728", "#ff9896", "#2ca02c", "#98df8a", "#9467bd"]
    width = 0.12
    for i, (name, color) in enumerate(zip(names, colors, strict=True)):
        xs, ys = [], []
        for g, key in enumerate(groups):
            o = by_name(w[key]).get(name)
            if o:
                xs.append(g + (i - 3) * width)
                ys.append(o["msgs_per_s"])
        if xs:
            ax.bar(xs, ys, width, label=name, color=color)
    ax.set_xticks(range(len(groups)), [f"{g}: {by_name(w[g])[RELAY]['rows']:,} msgs"
                                       for g in groups])
    ax.set_yscale("log")
    ax.set_ylabel("messages per second (log)")
    ax.set_title(f"Throughput{quick}")
    ax.legend(fontsize=8)
    ax = axes[1]
    if "W2" in w:
        pts = ["p50", "p95", "p99"]
        contenders = w["W2"]
        width = 0.8 / max(1, len(contenders))
        for i, o in enumerate(contenders):
            ax.bar([j + (i - (len(contenders) - 1) / 2) * width for j in range(3)],
                   [o["latency_s"][p] for p in pts], width, label=o["contender"],
                   color=colors[names.index(o["contender"])] if o["contender"] in names else None)
        ax.set_xticks(range(3), pts)
        ax.axhline(1.0, color="grey", ls="--", lw=0.8)
        ax.axhline(0.3, color="grey", ls=":", lw=0.8)
        ax.set_ylabel("seconds, created_at to consumer")
        ax.set_title(f"W2 latency at {w['W2'][0].get('achieved_rate', 0):.0f} msg/s{quick}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "bench.overview.png", dpi=110)
    plt.close(fig)
    made.append("bench.overview.png")

    if "W1" in w:
        made.append(_curves(plt, w["W1"], "progress", out_dir / "bench.w1-progress.png",
                            ("seconds since start", "records in Kafka"),
                            f"W1 drain progress{quick}"))
    if "W2" in w:
        made.append(_curves(plt, w["W2"], "cdf", out_dir / "bench.w2-cdf.png",
                            ("latency, seconds (log)", "fraction of messages"),
                            f"W2 latency distribution{quick}", log_x=True))

    if "W4" in w:
        rows = sorted(w["W4"], key=lambda o: o["rows"])
        fig, ax = plt.subplots(figsize=(7, 4.5))
        labels = [f"{o['rows']:,}" for o in rows]
        series = [("driver Python peak RSS", "driver_peak_rss_mb"),
                  ("driver JVM peak RSS", "jvm_peak_rss_mb"),
                  ("JVM heap after a full GC (max)", "heap_full_gc_max_mb"),
                  ("JVM heap retained between rounds", "heap_retained_max_mb")]
        for i, (label, key) in enumerate(series):
            ax.bar([j + (i - 1.5) * 0.2 for j in range(len(rows))],
                   [o.get(key) or 0 for o in rows], 0.2, label=label)
        ax.set_xticks(range(len(rows)), labels)
        ax.set_xlabel("backlog (messages)")
        ax.set_ylabel("MB")
        heap = results["meta"].get("driver_memory", "2g")
        ax.set_title(f"W4 memory, the same --driver-memory {heap}{quick}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / "bench.w4-memory.png", dpi=110)
        plt.close(fig)
        made.append("bench.w4-memory.png")
    if "W2C" in w:
        made.append(_curve(w["W2C"], out_dir, quick))
    return made


def _curve(outcomes: list[dict[str, Any]], out_dir: Path, quick: str) -> str:
    """p99 against the offered rate, a cross where a contender saturates."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for o in outcomes:
        pts = [p for p in o["points"] if p.get("latency_s")]
        line = ax.plot([p["rate"] for p in pts], [p["latency_s"]["p99"] for p in pts],
                       marker="o", label=o["contender"])
        for p in pts:
            if p["saturated"]:
                ax.plot(p["rate"], p["latency_s"]["p99"], "x", ms=12,
                        color=line[0].get_color())
    ax.axhline(1.5, color="grey", ls="--", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("offered rate, msg/s (log)")
    ax.set_ylabel("p99 latency, s (log); x: saturated")
    ax.set_title(f"W2 rate curve{quick}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "bench.w2c.png", dpi=110)
    plt.close(fig)
    return "bench.w2c.png"




def _curves(plt: Any, outcomes: list[dict[str, Any]], key: str, path: Path,
            labels: tuple[str, str], title: str, log_x: bool = False) -> str:
    """One line per contender from its (x, y) pairs under `key`; returns the file name."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for o in outcomes:
        if o.get(key):
            x, y = zip(*o[key], strict=True)
            ax.plot(x, y, label=o["contender"])
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name

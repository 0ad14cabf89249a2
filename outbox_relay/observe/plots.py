"""The notebook's figures, drawn with matplotlib from outbox_relay.observe.health's data.

matplotlib is not a dependency of the relay: Databricks runtimes ship it, and locally it
comes with the `test` and `bench` extras. Figures grow with their rows up to the health
module's top N, and say so when there is nothing to show.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from matplotlib import dates
from matplotlib.figure import Figure

from outbox_relay.observe.report import iso

ESTIMATED_HATCH = "//"
OVER_COLOUR = "tab:red"
BAR_COLOUR = "tab:blue"
OTHER_LABEL = "other"


def _figure(rows: int, width: float = 10.0) -> Figure:
    return Figure(figsize=(width, 1.6 + 0.32 * max(rows, 3)), layout="constrained")


def _empty(fig: Figure, title: str, text: str) -> Figure:
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return fig


def _label(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _bars(data: Mapping[str, Any], value: str, flag: str,
          other_note: str) -> tuple[list[str], list[Any], list[bool]]:
    """Labels, values and flags of a per-topic bar chart, `other` as its last bar."""
    rows = list(data["topics"])
    labels = [_label(r["topic"]) for r in rows]
    values = [r[value] for r in rows]
    flags = [bool(r[flag]) for r in rows]
    other = data.get("other")
    if other:
        labels.append(f"{OTHER_LABEL} ({other['topics']} {other_note})")
        values.append(other[value])
        flags.append(bool(other[flag]))
    return labels, values, flags


def backlog(data: Mapping[str, Any]) -> Figure:
    labels, values, exact = _bars(data, "backlog", "exact", "topics")
    fig = _figure(len(values))
    if not values:
        return _empty(fig, data["title"], "no messages waiting")
    ax = fig.add_subplot()
    bars = ax.barh(labels[::-1], values[::-1], color=BAR_COLOUR)
    for bar, is_exact, n in zip(bars, exact[::-1], values[::-1], strict=True):
        if not is_exact:
            bar.set_hatch(ESTIMATED_HATCH)
            bar.set_alpha(0.6)
        ax.annotate(f"{'' if is_exact else '~'}{n:,}", (bar.get_width(), bar.get_y() + 0.4),
                    xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    scale = ""
    if max(values) > 20 * min(v for v in values if v > 0):
        # An `other` of 900 topics would flatten every bar shown to nothing.
        ax.set_xscale("log")
        scale = ", log scale"
    ax.set_xlabel(f"messages waiting (~ and hatched: estimated{scale})")
    ax.set_title(f"{data['title']}: {data['total']:,} in {data['topics_with_backlog']} topic(s)")
    ax.margins(x=0.12)
    return fig


def oldest_age(data: Mapping[str, Any]) -> Figure:
    labels, ages, over = _bars(data, "oldest_age_s", "over", "topics, oldest")
    fig = _figure(len(ages))
    if not ages:
        return _empty(fig, data["title"], "no messages waiting")
    ax = fig.add_subplot()
    colours = [OVER_COLOUR if o else BAR_COLOUR for o in over]
    ax.barh(labels[::-1], ages[::-1], color=colours[::-1])
    threshold = data.get("threshold_s")
    if threshold is not None:
        ax.axvline(threshold, color=OVER_COLOUR, linestyle="--",
                   label=f"threshold {threshold:g} s")
        ax.legend(loc="lower right")
    ax.set_xlabel("seconds since the oldest waiting message was written")
    ax.set_title(f"{data['title']} ({data['over_threshold']} over the threshold)")
    return fig


STATE_COLUMNS = ("topic", "state", "retries", "backlog", "parked", "locked_by / retry_at",
                 "last_error")


def states(data: Mapping[str, Any]) -> Figure:
    rows = list(data["rows"])
    counts = ", ".join(f"{n} {s}" for s, n in data["counts"].items())
    title = f"{data['title']}: {counts}"
    fig = Figure(figsize=(14.0, 1.0 + 0.24 * (max(len(rows), 3) + 2)), layout="constrained")
    if not rows:
        return _empty(fig, title, "no topics")
    ax = fig.add_subplot()
    ax.set_axis_off()
    cells = [[_label(r["topic"], 40), r["state"], str(r["retries"]), f"{r['backlog']:,}",
              str(r["parked"]), _lock_or_retry(r),
              textwrap.shorten(r["last_error"] or "", 70, placeholder="…")] for r in rows]
    if data["more"]:
        cells.append([f"… {data['more']} more topic(s)", "", "", "", "", "", ""])
    table = ax.table(cellText=cells, colLabels=STATE_COLUMNS, loc="upper center",
                     cellLoc="left", colLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    table.auto_set_column_width(list(range(len(STATE_COLUMNS))))
    for (row, _), cell in table.get_celld().items():
        if row and row <= len(rows) and rows[row - 1]["state"] == "backoff":
            cell.set_facecolor("#fde0dc")
    ax.set_title(title)
    return fig


def _lock_or_retry(row: Mapping[str, Any]) -> str:
    if row["locked_by"]:
        return f"{_label(row['locked_by'], 30)} ({'alive' if row['lock_alive'] else 'EXPIRED'})"
    return row["retry_at"] or ""


def _minutes(data: Mapping[str, Any]) -> list[datetime]:
    first, last = (datetime.fromisoformat(data[k].replace("Z", "+00:00"))
                   for k in ("first_minute", "last_minute"))
    return [first + timedelta(minutes=i) for i in range(int((last - first).total_seconds()
                                                             // 60) + 1)]


# The lower panel: the last hour, where a drain of a few minutes is more than a sliver.
ZOOM_MINUTES = 60


def throughput(data: Mapping[str, Any]) -> Figure:
    series = list(data["series"])
    if data.get("other"):
        series.append({**data["other"], "topic": f"{OTHER_LABEL} ({data['other']['topics']})"})
    if not series:
        return _empty(_figure(12), data["title"], "no ledger records in the window")
    fig = Figure(figsize=(10.0, 7.0), layout="constrained")
    whole, zoom = fig.subplots(2, 1, height_ratios=(3, 2))
    minutes = _minutes(data)
    # One point more, at the end of the last minute: a step is as wide as its minute.
    x = [float(dates.date2num(m)) for m in [*minutes, minutes[-1] + timedelta(minutes=1)]]
    for s in series:
        # The JSON keeps only the minutes with records; the plot draws the zeros too.
        y = [s["per_minute"].get(iso(m), 0) for m in minutes]
        for ax in (whole, zoom):
            ax.plot(x, [*y, y[-1]], drawstyle="steps-post", linewidth=1,
                    label=f"{_label(s['topic'], 40)} ({s['total']:,})")
    for ax, first in ((whole, 0), (zoom, max(0, len(minutes) - ZOOM_MINUTES))):
        ax.set_xlim(x[first], x[-1])
        ax.xaxis.set_major_formatter(dates.DateFormatter("%H:%M"))
        ax.set_ylim(bottom=0)
        ax.set_ylabel("messages per minute")
    zoom.set_xlabel("UTC")
    zoom.set_title(f"the last {min(ZOOM_MINUTES, len(minutes))} minutes", fontsize=10)
    whole.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    title = data["title"]
    if data.get("delta_error"):
        title += f"\nDelta not read: {textwrap.shorten(data['delta_error'], 80)}"
    whole.set_title(title)
    return fig


def parked(data: Mapping[str, Any]) -> Figure:
    rows = list(data["reasons"])
    labels = [textwrap.fill(_label(r["reason"], 90), 45) for r in rows]
    values = [r["messages"] for r in rows]
    if data.get("other"):
        labels.append(f"{OTHER_LABEL} ({data['other']['reasons']} reasons)")
        values.append(data["other"]["messages"])
    fig = _figure(2 * len(values), width=11.0)
    if not values:
        return _empty(fig, data["title"], "nothing parked")
    ax = fig.add_subplot()
    bars = ax.barh(labels[::-1], values[::-1], color="tab:orange")
    ax.bar_label(bars, fmt="{:,.0f}", fontsize=8, padding=3)
    ax.set_xlabel("parked messages (digits in reasons shown as N)")
    ax.set_title(f"{data['title']}: {data['total']:,}")
    ax.margins(x=0.12)
    ax.tick_params(axis="y", labelsize=8)
    return fig


def save(fig: Figure, data: Mapping[str, Any], folder: str | Path, name: str) -> Path:
    """`name`.png and `name`.json (the figure's data) in `folder`; returns the PNG."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    png = out / f"{name}.png"
    fig.savefig(png, dpi=100)
    (out / f"{name}.json").write_text(json.dumps(data, indent=2, default=str) + "\n",
                                      encoding="utf-8")
    return png

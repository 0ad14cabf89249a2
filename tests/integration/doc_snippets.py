"""The ```python blocks of a docs page, with the heading of the section each is in.

A block right after `<!-- not run: <reason> -->` is left out of the runnable ones
(`runnable`), and found by its reason (`not_run`): a pytest file shown in the docs is run
by a test that takes its text from here, so the page and the test cannot drift. A runnable
block followed by a line `prints` and a ```text block is expected to print that text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
_FENCE = re.compile(r"^```(\w*)\s*$")
_NOT_RUN = re.compile(r"^<!--\s*not run:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    heading: str
    number: int  # 1-based, among the page's python blocks
    code: str
    not_run: str | None  # the reason, for a block not run
    prints: str | None  # the expected output, when the page shows it

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.heading.lower()).strip("-")
        return f"{self.number}-{slug}"


def blocks(page: str) -> list[Block]:
    lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    heading, i = "", 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif fence and fence[1]:
            end = _closing(lines, i)
            if fence[1] == "python":
                reason = _NOT_RUN.match(_previous(lines, i))
                found.append(Block(heading, len(found) + 1, "\n".join(lines[i + 1:end]) + "\n",
                                   reason[1] if reason else None, _prints(lines, end)))
            i = end
        i += 1
    return found


def runnable(page: str) -> list[Block]:
    return [b for b in blocks(page) if b.not_run is None]


def not_run(page: str, reason_start: str) -> Block:
    """The one block not run whose reason starts with `reason_start`."""
    [block] = [b for b in blocks(page) if (b.not_run or "").startswith(reason_start)]
    return block


def _closing(lines: list[str], start: int) -> int:
    for j in range(start + 1, len(lines)):
        if lines[j].strip() == "```":
            return j
    raise ValueError(f"unclosed code block at line {start + 1}")


def _previous(lines: list[str], i: int) -> str:
    j = i - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    return lines[j] if j >= 0 else ""


def _prints(lines: list[str], end: int) -> str | None:
    rest = [j for j in range(end + 1, len(lines)) if lines[j].strip()][:2]
    if len(rest) == 2 and lines[rest[0]].strip() == "prints" and _FENCE.match(lines[rest[1]]):
        close = _closing(lines, rest[1])
        return "\n".join(lines[rest[1] + 1:close]) + "\n"
    return None

"""README.md and docs/*.md as the doc tests read them: prose, fenced blocks and inline code.

tests/unit/test_doc_paths.py checks the paths they name, tests/unit/test_doc_commands.py
the commands. (tests/integration/doc_snippets.py runs their ```python blocks.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

SHELL_BLOCKS = {"sh", "shell", "bash", "console"}
CODE_SPAN = re.compile(r"`([^`]+)`")


def page_id(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def blocks(text: str) -> Iterator[tuple[str, str]]:
    """(kind, text) of a page: "prose" lines, a fenced block's lines under its info string
    (a line ending in a backslash joined with the next, as a shell reads it), and "span"
    for inline code (which may run over a line break)."""
    fence: str | None = None
    prose = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else (stripped[3:].strip() or "text")
            prose.append("")
        elif fence is not None:
            prose.append("")
            if line.endswith("\\"):
                pending += line[:-1]
                continue
            yield fence, pending + line
            pending = ""
        else:
            yield "prose", line
            prose.append(line)
    for span in CODE_SPAN.findall("\n".join(prose)):
        if "\n\n" not in span:
            yield "span", span.replace("\n", " ")

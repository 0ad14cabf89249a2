"""What README.md and docs/*.md name exists: every repository path (in backticks, in a
shell block, or a link's target). The README stays a short page that links to every doc
page. The commands they show: test_doc_commands.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doc_pages import PAGES, README, REPO, SHELL_BLOCKS, blocks, page_id

README_MAX_LINES = 200

# Named by the pages, held by no checkout: built, generated at run time, or the user's own.
# An entry ending in "/" covers everything under it.
NOT_IN_THE_REPOSITORY = (
    "dist/",            # `python -m build --wheel` writes the wheel there
    ".venv", ".venv/",  # made by `make setup`
    ".venv-airflow", ".venv-airflow/",  # made by `make airflow-venv`
    ".venv-airflow-oldest", ".venv-airflow-oldest/",  # made by `make airflow-venv`
    ".relay-data/",     # the local stack's data and tools, git-ignored
    "conf/prod.toml",   # the profile a user writes from conf/local.toml
    "/Volumes/",        # a Databricks workspace's Unity Catalog Volumes
    "/dbfs/",           # a Databricks driver's DBFS mount
    "/metrics",         # the HTTP path a continuous relay serves, not a file
    ".databricks/",     # the Databricks CLI's local state, git-ignored (variable overrides)
    "/Workspace/",      # a Databricks workspace's folders
)
FILE_SUFFIXES = {".py", ".toml", ".yml", ".yaml", ".md", ".json", ".txt", ".png", ".sql",
                 ".xml", ".whl", ".cfg", ".ini"}
PATH_WORD = re.compile(r"/?[A-Za-z0-9_.*-]+(/[A-Za-z0-9_.*-]+)*/?(::[A-Za-z0-9_]+)?")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PUNCTUATION = "\"'(),;:|"


def _path_words(page: Path) -> Iterator[str]:
    for kind, text in blocks(page.read_text(encoding="utf-8")):
        if kind in ("span", *SHELL_BLOCKS):
            for word in text.split():
                word = word.strip(PUNCTUATION)
                if _looks_like_a_path(word):
                    yield word


def _looks_like_a_path(word: str) -> bool:
    if not PATH_WORD.fullmatch(word) or word in ("/", "."):
        return False
    return "/" in word or Path(word.split("::")[0]).suffix in FILE_SUFFIXES


def _links(page: Path) -> Iterator[str]:
    """Link targets that name a file, relative to the repository's root, with their
    `#anchor` if they have one."""
    for kind, text in blocks(page.read_text(encoding="utf-8")):
        if kind != "prose":
            continue
        for target in LINK.findall(text):
            name, _, anchor = target.partition("#")
            if re.match(r"[a-z]+:", target):
                continue
            path = (page.parent / name).resolve() if name else page
            yield path.relative_to(REPO).as_posix() + (f"#{anchor}" if anchor else "")


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def _missing(path: str) -> str | None:
    """Why `path` (relative to the root; `file.py::test_name` or `page.md#anchor` allowed)
    is not there."""
    if path in NOT_IN_THE_REPOSITORY or any(
            e.endswith("/") and path.startswith(e) for e in NOT_IN_THE_REPOSITORY):
        return None
    path, _, anchor = path.partition("#")
    name, _, test = path.partition("::")
    matches = list(REPO.glob(name.lstrip("/"))) if "*" in name else [REPO / name]
    if name.startswith("/") or not any(m.exists() for m in matches):
        return "no such path"
    if anchor and anchor not in _anchors(REPO / name):
        return f"no heading for #{anchor}"
    if test and f"def {test}(" not in matches[0].read_text(encoding="utf-8"):
        return f"no test {test} in it"
    return None


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_named_path_exists(page: Path) -> None:
    named = sorted(set(_path_words(page)) | set(_links(page)))
    wrong = {p: why for p in named if (why := _missing(p)) is not None}
    assert not wrong, f"{page.relative_to(REPO)} names what the repository lacks: {wrong}"


def test_the_readme_is_short_and_links_every_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    linked = {link.partition("#")[0] for link in _links(README)}
    unlinked = [p.name for p in PAGES[1:] if p.relative_to(REPO).as_posix() not in linked]
    assert not unlinked, f"README.md links no page for {unlinked}"
    assert PAGES[1:], "docs/ holds no page"

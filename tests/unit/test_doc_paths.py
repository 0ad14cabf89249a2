"""What README.md and docs/*.md name exists: every repository path (in backticks, in a
shell block, or a link's target) and every `outbox-relay` sub-command, the latter read
from the CLI's own parser. The README stays a short page that links to every doc page."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox_relay.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
README_MAX_LINES = 200

# Named by the pages, held by no checkout: built, generated at run time, or the user's own.
# An entry ending in "/" covers everything under it.
NOT_IN_THE_REPOSITORY = (
    "dist/",            # `python -m build --wheel` writes the wheel there
    ".venv", ".venv/",  # made by `make setup`
    ".venv-airflow", ".venv-airflow/",  # made by `make airflow-venv`
    ".venv-airflow-oldest", ".venv-airflow-oldest/",
    ".relay-data/",     # the local stack's data and tools, git-ignored
    "conf/prod.toml",   # the profile a user writes from conf/local.toml
    "/Volumes/",        # a Databricks workspace's Unity Catalog Volumes
    "/dbfs/",           # a Databricks driver's DBFS mount
    "/metrics",         # the HTTP path a continuous relay serves, not a file
    ".databricks/",     # the Databricks CLI's local state, git-ignored (variable overrides)
    "/Workspace/",      # a Databricks workspace's folders
)
# `outbox-relay ...` phrases that are names, not command lines.
NOT_COMMANDS = {
    "outbox-relay drain",       # the bundle's drain job (resources/outbox_relay.job.yml)
    "outbox-relay continuous",  # the bundle's continuous job
}

SHELL_BLOCKS = {"sh", "shell", "bash", "console"}
FILE_SUFFIXES = {".py", ".toml", ".yml", ".yaml", ".md", ".json", ".txt", ".png", ".sql",
                 ".xml", ".whl", ".cfg", ".ini"}
PATH_WORD = re.compile(r"/?[A-Za-z0-9_.*-]+(/[A-Za-z0-9_.*-]+)*/?(::[A-Za-z0-9_]+)?")
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`]+)`")
COMMAND = re.compile(r"(?<![\w/.-])outbox-relay(?=\s|$)((?:[ \t]+[^\s`]+)*)")
PUNCTUATION = "\"'(),;:|"
# `databricks bundle VERB ARGS`; a VERB alone in a code span is the command's name in prose.
BUNDLE_COMMAND = re.compile(r"databricks\s+bundle\s+([a-z-]+)((?:[ \t]+[^\s`]+)*)")
BUNDLE_TARGET = re.compile(r"(?:^|\s)(?:-t|--target)[ =](?:dev|prod)(?:\s|$)")
# The CLI's bundle commands that take no target.
BUNDLE_UNTARGETED = {"init", "schema"}


def _blocks(text: str) -> Iterator[tuple[str, str]]:
    """(kind, text) of a page: "prose" lines, a fenced block's lines under its info string,
    and "span" for inline code (which may run over a line break)."""
    fence: str | None = None
    prose = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else (stripped[3:].strip() or "text")
            prose.append("")
        elif fence is not None:
            yield fence, line
            prose.append("")
        else:
            yield "prose", line
            prose.append(line)
    for span in CODE_SPAN.findall("\n".join(prose)):
        if "\n\n" not in span:
            yield "span", span.replace("\n", " ")


def _path_words(page: Path) -> Iterator[str]:
    for kind, text in _blocks(page.read_text(encoding="utf-8")):
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
    for kind, text in _blocks(page.read_text(encoding="utf-8")):
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


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_named_path_exists(page: Path) -> None:
    named = sorted(set(_path_words(page)) | set(_links(page)))
    wrong = {p: why for p in named if (why := _missing(p)) is not None}
    assert not wrong, f"{page.relative_to(REPO)} names what the repository lacks: {wrong}"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command_problem(words: list[str], parser: argparse.ArgumentParser) -> str | None:
    """Why `outbox-relay WORDS` names no sub-command of the real parser, or None."""
    words = [w.strip(PUNCTUATION) for w in words]
    while words[:1] == ["--config"]:
        words = words[2:]
    while commands := _subcommands(parser):
        # A placeholder (TOPIC), an option or the end: nothing more names a sub-command.
        if not words or not re.fullmatch(r"[a-z][a-z-]*", words[0]):
            return None
        if words[0] not in commands:
            return f"{words[0]!r} is not one of {sorted(commands)}"
        parser, words = commands[words[0]], words[1:]
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_named_subcommand_exists(page: Path) -> None:
    parser = build_parser()
    assert len(_subcommands(parser)) > 5, "the CLI's sub-commands were not found"
    wrong = {}
    for kind, text in _blocks(page.read_text(encoding="utf-8")):
        if kind == "prose" or kind == "python":
            continue
        for match in COMMAND.finditer(text):
            phrase = match.group(0).strip()
            if any(phrase.startswith(name) for name in NOT_COMMANDS):
                continue
            if (problem := _command_problem(match.group(1).split(), parser)) is not None:
                wrong[phrase] = problem
    assert not wrong, f"{page.relative_to(REPO)} names commands the CLI lacks: {wrong}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_bundle_command_names_its_target(page: Path) -> None:
    """Without `-t`, a bundle command acts on the default target, dev: a deploy meant for
    prod (pausing its drain for Airflow, say) changes dev and leaves prod as it was."""
    untargeted = [f"databricks bundle {verb}{args}"
                  for kind, text in _blocks(page.read_text(encoding="utf-8"))
                  if kind in ("span", *SHELL_BLOCKS)
                  for verb, args in BUNDLE_COMMAND.findall(text)
                  if args.strip() and verb not in BUNDLE_UNTARGETED
                  and not BUNDLE_TARGET.search(args.split("#")[0])]

    assert untargeted == [], f"{page.relative_to(REPO)}: no -t dev or -t prod in {untargeted}"


def test_the_readme_is_short_and_links_every_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    linked = {link.partition("#")[0] for link in _links(README)}
    unlinked = [p.name for p in PAGES[1:] if p.relative_to(REPO).as_posix() not in linked]
    assert not unlinked, f"README.md links no page for {unlinked}"
    assert PAGES[1:], "docs/ holds no page"

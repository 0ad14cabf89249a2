"""Every command README.md and docs/*.md show, in a fenced block or inline code (never a
Python block), names only what exists, read from the real parsers and the Makefile:

- `outbox-relay ...` and `python -m outbox_relay.cli ...`: the sub-commands and options
  of outbox_relay.cli.build_parser; a global option (`--config`) on either side of the
  sub-command;
- `spark-submit ... jobs/relay.py ...`: the options of outbox_relay.app.parser, and
  `jobs/migrate.py` the CLI's global ones (spark-submit's own, before the script, are
  Spark's);
- `make ...`: the Makefile's targets;
- `databricks bundle ...`: a target, `-t dev` or `-t prod`.

Values and placeholders (TOPIC, ID..., <id>) are not checked.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from outbox_relay.app import parser as relay_parser
from outbox_relay.cli import build_parser
from tests.doc_pages import PAGES, REPO, SHELL_BLOCKS, blocks, page_id

MAKEFILE = REPO / "Makefile"
# `outbox-relay ...` phrases that are names, not command lines.
NOT_COMMANDS = {
    "outbox-relay drain",       # the bundle's drain job (resources/outbox_relay.job.yml)
    "outbox-relay continuous",  # the bundle's continuous job
}
# Where one command of a line ends and the next begins; a comment ends them all.
_SEPARATOR = re.compile(r"\s(?:&&|\|\||\||;)\s|\$\(")
_COMMENT = re.compile(r"(?:^|\s)#.*$")
_OPTION = re.compile(r"(--?[A-Za-z][\w-]*)(=.*)?")
_SUBCOMMAND = re.compile(r"[a-z][a-z-]*")
_MAKE_TARGET = re.compile(r"^([A-Za-z][\w.-]*(?:[ \t]+[A-Za-z][\w.-]*)*)[ \t]*:(?!=)")
QUOTES = "\"'()`"
PUNCTUATION = QUOTES + ",;:"
CLI_MODULES = {"outbox_relay.cli": build_parser}
# `databricks bundle VERB ARGS`; a VERB alone in a code span is the command's name in prose.
BUNDLE_COMMAND = re.compile(r"databricks\s+bundle\s+([a-z-]+)((?:[ \t]+[^\s`]+)*)")
BUNDLE_TARGET = re.compile(r"(?:^|\s)(?:-t|--target)[ =](?:dev|prod)(?:\s|$)")
# The CLI's bundle commands that take no target.
BUNDLE_UNTARGETED = {"init", "schema"}


def commands(text: str) -> Iterator[tuple[str, list[str]]]:
    """(program, words after it) of each command in a line: "outbox-relay" (also as
    `python -m outbox_relay...`, then the module), "spark-submit" or "make"."""
    for segment in _SEPARATOR.split(_COMMENT.sub("", text)):
        # Quotes and brackets around a word are not part of it; a colon or a comma after
        # it is ("outbox-relay: ..." is a message, not a command).
        words = [w.strip(QUOTES) for w in segment.split()]
        for i, word in enumerate(words):
            rest = [w.strip(PUNCTUATION) for w in words[i + 1:]]
            if word.rpartition("/")[2] == "outbox-relay":
                yield "outbox-relay", rest
            elif word in ("spark-submit", "make"):
                yield word, rest
            elif (re.fullmatch(r"(.*/)?python(3[.\d]*)?", word) and rest[:1] == ["-m"]
                  and rest[1:2] and rest[1].partition(".")[0] == "outbox_relay"):
                yield rest[1], rest[2:]


def _options(word: str) -> list[str]:
    """The options a word shows: `--flag`, `--flag=value`, `[--flag]`, `ID...|--topic`."""
    parts = (p.strip("[]{}") for p in word.strip("[]{}").split("|"))
    return [m[1] for p in parts if (m := _OPTION.fullmatch(p))]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def parser_problem(words: list[str], parser: argparse.ArgumentParser, name: str) -> str | None:
    """Why `NAME WORDS` is no command line of `parser`, or None. An option is looked up
    in the parser of its sub-command and every parser above it."""
    chain, path = [parser], [name]
    value_next = placeholder = False
    for word in words:
        if value_next:
            value_next = False
            continue
        if options := _options(word):
            for option in options:
                action = next((p._option_string_actions[option] for p in reversed(chain)
                               if option in p._option_string_actions), None)
                if action is None:
                    return f"{option} is no option of `{' '.join(path)}`"
            value_next = action.nargs != 0 and "=" not in word and not word.endswith("]")
            continue
        commands_here = _subcommands(chain[-1])
        if not commands_here or placeholder:
            continue
        if not _SUBCOMMAND.fullmatch(word):
            placeholder = True  # TOPIC, ID..., a value: no sub-command follows
        elif word not in commands_here:
            return f"{word!r} is not one of {sorted(commands_here)}"
        else:
            chain.append(commands_here[word])
            path.append(word)
    return None


def make_targets() -> set[str]:
    lines = MAKEFILE.read_text(encoding="utf-8").splitlines()
    return {t for line in lines if (m := _MAKE_TARGET.match(line)) for t in m[1].split()}


def command_problem(program: str, words: list[str]) -> str | None:
    """Why the command `PROGRAM WORDS` names something that does not exist, or None."""
    if program == "outbox-relay":
        if f"{program} {words[0] if words else ''}".strip() in NOT_COMMANDS:
            return None
        return parser_problem(words, build_parser(), program)
    if program == "make":
        targets = [w for w in words if not w.startswith("-") and "=" not in w]
        unknown = sorted(set(targets) - make_targets())
        return f"no make target {unknown}" if unknown else None
    if program == "spark-submit":
        script = next((i for i, w in enumerate(words) if w.endswith(".py")), None)
        if script is None:
            return None
        parsers: dict[str, Callable[[], argparse.ArgumentParser]] = {
            "jobs/relay.py": relay_parser,
            # jobs/migrate.py appends its sub-command: its own words are global options.
            "jobs/migrate.py": lambda: _without_subcommands(build_parser()),
        }
        make = parsers.get(words[script])
        return None if make is None else parser_problem(words[script + 1:], make(),
                                                        words[script])
    if importlib.util.find_spec(program) is None or not _runnable(program):
        return f"no module {program} to run"
    make_cli = CLI_MODULES.get(program)
    return None if make_cli is None else parser_problem(words, make_cli(), f"-m {program}")


def _runnable(module: str) -> bool:
    spec = importlib.util.find_spec(module)
    is_package = spec is not None and spec.submodule_search_locations is not None
    return not is_package or importlib.util.find_spec(f"{module}.__main__") is not None


def _without_subcommands(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser._actions = [a for a in parser._actions
                       if not isinstance(a, argparse._SubParsersAction)]
    return parser


def _page_commands(page: Path) -> Iterator[tuple[str, list[str]]]:
    for kind, text in blocks(page.read_text(encoding="utf-8")):
        if kind not in ("prose", "python"):
            yield from commands(text)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_command_a_page_shows_exists(page: Path) -> None:
    wrong = {" ".join([program, *words]): problem
             for program, words in _page_commands(page)
             if (problem := command_problem(program, words)) is not None}
    assert not wrong, f"{page_id(page)} shows commands that do not exist: {wrong}"


def test_the_pages_show_commands_of_every_kind() -> None:
    """The checker finds what it checks: a parser that found nothing would pass."""
    found = Counter(program for page in PAGES for program, _ in _page_commands(page))
    print(dict(found))
    assert found["outbox-relay"] >= 20 and found["make"] >= 5
    assert found["spark-submit"] >= 5
    assert {"setup", "demo", "test", "faults", "bench"} <= make_targets()
    assert len(_subcommands(build_parser())) > 5, "the CLI's sub-commands were not found"


@pytest.mark.parametrize(("line", "problem"), [
    ("outbox-relay stauts", "'stauts' is not one of"),
    ("outbox-relay run --availble-now", "--availble-now is no option of `outbox-relay run`"),
    ("outbox-relay ledger show --id 1 --topics t", "--topics is no option"),
    ("make demo test-all   # all", "no make target ['test-all']"),
    ("spark-submit --master local[2] jobs/relay.py --avaliable-now", "--avaliable-now"),
    ("spark-submit jobs/migrate.py --available-now", "--available-now is no option"),
    ("RELAY_X=1 .venv/bin/python -m outbox_relay status", "no module outbox_relay to run"),
    ("python -m outbox_relay.cli statsu", "'statsu' is not one of"),
    ('spark-submit --jars "$(outbox-relay jar)" jobs/relay.py', "'jar' is not one of"),
])
def test_a_command_that_does_not_exist_is_named(line: str, problem: str) -> None:
    problems = [p for c in commands(line) if (p := command_problem(*c)) is not None]
    assert len(problems) == 1 and problem in problems[0], problems


@pytest.mark.parametrize("line", [
    "outbox-relay --config conf/local.toml run --available-now --time-budget-s 300",
    "outbox-relay run --config conf/local.toml [--available-now]",  # global after it
    "outbox-relay parked requeue ID...|--topic T # back into the outbox",
    "outbox-relay status [--json] [--max-age-s N] [--fail-on backoff,parked]",
    "outbox-relay stack up | down | env",
    "outbox-relay topics retry TOPIC",
    "RELAY_FAULTS_LONG=1 make faults FAULTS_ARGS=--long",
    "spark-submit --master spark://h:7077 jobs/relay.py --config P --available-now",
    "python -m outbox_relay.cli --config p.toml migrate",
    "ce_source = outbox-relay (relay.source_name)",
])
def test_a_command_that_exists_passes(line: str) -> None:
    assert [p for c in commands(line) if (p := command_problem(*c)) is not None] == []


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_bundle_command_names_its_target(page: Path) -> None:
    """Without `-t`, a bundle command acts on the default target, dev: a deploy meant for
    prod (pausing its drain for Airflow, say) changes dev and leaves prod as it was."""
    untargeted = [f"databricks bundle {verb}{args}"
                  for kind, text in blocks(page.read_text(encoding="utf-8"))
                  if kind in ("span", *SHELL_BLOCKS)
                  for verb, args in BUNDLE_COMMAND.findall(text)
                  if args.strip() and verb not in BUNDLE_UNTARGETED
                  and not BUNDLE_TARGET.search(_COMMENT.sub("", args))]

    assert untargeted == [], f"{page_id(page)}: no -t dev or -t prod in {untargeted}"

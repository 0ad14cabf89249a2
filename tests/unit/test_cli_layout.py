"""The CLI is one package, `outbox_relay.cli`, whose modules register their sub-commands one way:
each module's `register(sub)` adds its commands and binds each to its handler (`fn`), and
`build_parser` adds nothing of its own. The modules it replaced are gone."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil
from types import ModuleType

import pytest

import outbox_relay.cli
from outbox_relay.cli import build_parser


def _command_modules() -> list[ModuleType]:
    names = [m.name for m in pkgutil.iter_modules(outbox_relay.cli.__path__)
             if m.name != "__main__"]
    return [importlib.import_module(f"outbox_relay.cli.{name}") for name in sorted(names)]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _handled(parser: argparse.ArgumentParser) -> bool:
    """The command has a handler, or each of its own sub-commands has one."""
    if callable(parser.get_default("fn")):
        return True
    commands = _subcommands(parser)
    return bool(commands) and all(_handled(command) for command in commands.values())


def test_the_cli_is_a_package_runnable_with_python_m() -> None:
    assert hasattr(outbox_relay.cli, "__path__")
    assert importlib.util.find_spec("outbox_relay.cli.__main__") is not None
    assert callable(outbox_relay.cli.main) and callable(outbox_relay.cli.run_argv)


@pytest.mark.parametrize("gone", ["relay", "outbox_relay.cli_ops", "outbox_relay.observe.cli",
                                  "outbox_relay.stack.cli"])
def test_the_old_cli_modules_are_gone(gone: str) -> None:
    assert importlib.util.find_spec(gone) is None


def test_every_command_is_registered_by_one_module_with_its_handler() -> None:
    registered: dict[str, str] = {}
    for module in _command_modules():
        assert callable(getattr(module, "register", None)), module.__name__
        parser = argparse.ArgumentParser()
        module.register(parser.add_subparsers())
        commands = _subcommands(parser)
        assert commands, f"{module.__name__} registers no command"
        for name, command in commands.items():
            assert name not in registered, f"{name}: {registered.get(name)} and {module.__name__}"
            assert _handled(command), f"{name} has no handler"
            registered[name] = module.__name__
    assert set(_subcommands(build_parser())) == set(registered)

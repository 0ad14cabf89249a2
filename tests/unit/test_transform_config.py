"""A topic rule's `transform`: its syntax at config load, its import at start-up."""

from __future__ import annotations

import pytest

from outbox_relay.app import check_transforms
from outbox_relay.config.load import build_config
from outbox_relay.errors import ConfigError
from outbox_relay.exit_codes import ExitCode

MODULE = "tests.integration.transforms_for_tests"


def _rules(*transforms: str) -> dict[str, object]:
    return {"relay": {"topic_rules": [{"match": f"t{i}", "transform": t}
                                      for i, t in enumerate(transforms)]}}


@pytest.mark.parametrize("spec", [
    "module", "module:", ":function", "package.module:function.attribute",
    "package..module:function", "1package:function", "package.module:fn()",
    "package module:function", "package/module:function",
])
def test_a_malformed_transform_is_refused_at_load_naming_the_key(spec: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_config(_rules(f"{MODULE}:identity", spec), env={})
    assert "relay.topic_rules.1.transform" in str(caught.value)
    assert "package.module:function" in str(caught.value)


def test_a_well_formed_transform_loads_and_the_default_is_none() -> None:
    config = build_config(_rules(f"{MODULE}:encrypt_secret", "m:f", "_a.b_2:_c"), env={})
    assert [r.transform for r in config.relay.topic_rules] == [
        f"{MODULE}:encrypt_secret", "m:f", "_a.b_2:_c"]
    assert build_config({"relay": {"topic_rules": [{"match": "x"}]}},
                        env={}).relay.topic_rules[0].transform is None


@pytest.mark.parametrize(("spec", "says"), [
    ("tests.integration.no_such_module:f", "cannot import tests.integration.no_such_module: "
                                           "ModuleNotFoundError"),
    (f"{MODULE}:no_such_function", f"{MODULE} has no function no_such_function"),
    (f"{MODULE}:NOT_A_FUNCTION", f"{MODULE} has no function NOT_A_FUNCTION"),
])
def test_start_up_refuses_a_transform_it_cannot_import_or_call(spec: str, says: str) -> None:
    config = build_config(_rules(f"{MODULE}:identity", spec), env={})
    with pytest.raises(ConfigError) as caught:
        check_transforms(config)
    assert str(caught.value).startswith(f"relay.topic_rules.1.transform: transform {spec}: ")
    assert says in str(caught.value)
    assert caught.value.exit_code == ExitCode.USAGE


def test_start_up_accepts_importable_transforms() -> None:
    check_transforms(build_config(_rules(f"{MODULE}:encrypt_secret", f"{MODULE}:identity"),
                                  env={}))

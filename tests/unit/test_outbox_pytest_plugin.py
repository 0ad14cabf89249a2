"""The pytest plugin for applications (outbox_relay.testing): registered by the installed
package, and light to load, since pytest loads it in every run of every project that
installed outbox-relay. What it asserts is tested on the real database by
tests/integration/test_outbox_plugin.py and test_outbox_plugin_async.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import pytest

from outbox_relay.errors import PublishError
from outbox_relay.testing import Outbox, PublishedMessage
from outbox_relay.testing.assertions import report


def test_the_plugin_is_the_pytest11_entry_point() -> None:
    [entry] = [e for e in entry_points(group="pytest11") if e.name == "outbox_relay"]
    assert entry.value == "outbox_relay.testing.pytest_plugin"


def test_loading_the_plugin_imports_no_spark_kafka_client_or_driver() -> None:
    code = textwrap.dedent("""
        import sys
        import outbox_relay.testing.pytest_plugin
        heavy = ("pyspark", "py4j", "confluent_kafka", "psycopg2", "psycopg", "sqlalchemy",
                 "asyncpg", "delta", "deltalake", "opentelemetry", "pydantic")
        print(sorted(m for m in sys.modules if m.split(".")[0] in heavy))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_an_unknown_connection_is_refused_by_name() -> None:
    with pytest.raises(PublishError, match=r"cannot read the outbox through a builtins\.object"):
        Outbox().published(object())


def test_the_report_previews_values() -> None:
    long = PublishedMessage(1, "t", b"v" * 100, None, "pk", {"a": "b"})
    assert report([long]) == (
        "This transaction published 1 message(s):\n"
        f"  topic='t' key=None value=b'{'v' * 80}'... (100 bytes) partition_key='pk' "
        "headers={'a': 'b'}")
    assert report([]) == "This transaction published nothing."

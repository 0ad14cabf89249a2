"""The relay needs modules that the base install leaves to its extras.

`pip install outbox-relay` is what an application installs to publish: the publisher and
the test fixture, which import nothing outside the standard library. The relay's own
runtime (its configuration models, PostgreSQL and Kafka clients, the Delta reader, the
Prometheus client) is the `[relay]` extra; Spark is the `[spark]` extra (which includes
`[relay]`), left out of the base because a Databricks Runtime ships its own pyspark, numpy
and pyarrow, which pip must not replace. In a Python without them, the first import deep
in a command would end in a traceback that names a module but not the fix; so each
command looks for them before it imports any, and stops with one line (exit 2, USAGE).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from importlib.machinery import ModuleSpec

from outbox_relay.errors import ConfigError

RELAY_EXTRA = "relay"
# What the commands import, as module names (pyproject.toml's [relay] extra names their
# distributions; tests/unit/test_packaging.py keeps the two together).
RELAY_EXTRA_MODULES = ("pydantic", "pydantic_settings", "psycopg2", "confluent_kafka",
                       "deltalake", "prometheus_client")
RELAY_INSTALL = f"pip install 'outbox-relay[{RELAY_EXTRA}]'"

# What the run itself imports, in the order the line names them: numpy through
# outbox_relay/data/partitioning_arrow.py (the ledger copy's partitioner), pyarrow through it, the
# transforms' Arrow UDFs and the Python data source. Not pandas, which the relay never
# imports: the extra installs it for pyspark's sake, and a runtime without it is not refused.
SPARK_EXTRA_MODULES = ("pyspark", "numpy", "pyarrow")
INSTALL = "pip install 'outbox-relay[spark]'"

Finder = Callable[[str], ModuleSpec | None]


def _present(name: str, find: Finder) -> bool:
    try:
        return find(name) is not None
    except ValueError:  # in sys.modules without a __spec__ (put there by hand): importable
        return True


def missing_modules(names: tuple[str, ...],
                    find: Finder = importlib.util.find_spec) -> list[str]:
    """The modules of `names` this Python cannot import, found without importing any: where
    they are installed the check costs nothing."""
    return [name for name in names if not _present(name, find)]


def missing_spark_modules(find: Finder = importlib.util.find_spec) -> list[str]:
    return missing_modules(SPARK_EXTRA_MODULES, find)


def require_relay_extra(find: Finder = importlib.util.find_spec) -> None:
    """ConfigError, one line naming each missing module and the extra, if any is missing."""
    missing = missing_modules(RELAY_EXTRA_MODULES, find)
    if missing:
        raise ConfigError(
            f"this Python has no {', '.join(missing)}, which outbox-relay's commands need: "
            f"the base install is the publisher alone; install the [{RELAY_EXTRA}] extra "
            f"({RELAY_INSTALL}), or [spark] to run the relay outside a Spark runtime "
            "(it includes them)")


def require_spark_extra(find: Finder = importlib.util.find_spec) -> None:
    """ConfigError, one line naming each missing module and the extra, if any is missing."""
    missing = missing_spark_modules(find)
    if missing:
        raise ConfigError(
            f"this Python has no {', '.join(missing)}, which the relay's run needs: install "
            f"the [spark] extra ({INSTALL}), or run it on a Spark runtime that ships them")

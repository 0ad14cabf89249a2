"""The relay's run needs modules that the base install leaves to the `[spark]` extra.

The base leaves them out because a Databricks Runtime ships its own pyspark, numpy and
pyarrow, which pip must not replace. A plain Python has none of them, and the first import
deep in the run would end in a traceback that names a module but not the fix; so the run
looks for them before it imports any, and stops with one line (exit 2, USAGE).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from importlib.machinery import ModuleSpec

from outbox_relay.errors import ConfigError

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


def missing_spark_modules(find: Finder = importlib.util.find_spec) -> list[str]:
    """The modules of SPARK_EXTRA_MODULES this Python cannot import, found without
    importing any: on a runtime that has them the check costs nothing."""
    return [name for name in SPARK_EXTRA_MODULES if not _present(name, find)]


def require_spark_extra(find: Finder = importlib.util.find_spec) -> None:
    """ConfigError, one line naming each missing module and the extra, if any is missing."""
    missing = missing_spark_modules(find)
    if missing:
        raise ConfigError(
            f"this Python has no {', '.join(missing)}, which the relay's run needs: install "
            f"the [spark] extra ({INSTALL}), or run it on a Spark runtime that ships them")

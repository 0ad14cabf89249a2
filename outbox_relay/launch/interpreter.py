"""The relay process's interpreter, set up before anything else runs: its cyclic garbage
collector tuned for its rounds, and pyspark imported with cached bytecode
(docs/performance.md, "The relay's interpreter").

The collector: a write of the direct lane makes some 25,000 container objects (each
row's tuple from psycopg2, its record, its header list and tuples), and the driver holds
two writes of every database it relays at once (outbox_relay.stream.direct_lane). At
Python's default threshold (a young collection every 700 net allocations) the collector
ran dozens of times a write, each time walking the records still held: on eight
databases it took a third of the interpreter's time, and that interpreter is what eight
databases share. The relay makes few reference cycles, so young collections every
GEN0_THRESHOLD allocations still free them, with little memory waiting.
"""

from __future__ import annotations

import gc
import importlib.metadata
import sys
from collections.abc import Callable
from pathlib import Path

# Net container allocations between young collections; the older generations keep
# Python's ratios (every 10 young, every 10 middle), so full ones stay as rare relative
# to the young ones as by default.
GEN0_THRESHOLD = 50_000
_OLDER = (10, 10)


def tune_collector() -> None:
    """Sets the thresholds for this process (the relay's own: app.main)."""
    gc.set_threshold(GEN0_THRESHOLD, *_OLDER)


def prefer_installed_pyspark(path: list[str] | None = None,
                             version: Callable[[str], str] = importlib.metadata.version
                             ) -> list[str]:
    """Drops from `path` (sys.path) the zips of pyspark and py4j that spark-submit puts
    first when the same files are installed as packages; returns what it dropped.

    spark-submit's PYTHONPATH names $SPARK_HOME/python/lib/pyspark.zip and py4j's zip.
    zipimport never caches bytecode, so every start compiled pyspark's modules again:
    0.6-1 s of CPU, in the thread that takes spark-submit's stop signals, beside the
    first rounds. With pip's pyspark, SPARK_HOME is the installed package itself: its zip
    holds the package's own files, and py4j's zip the version pip pinned beside it (the
    zip's name says which). A Spark of its own (a cluster's, SPARK_HOME elsewhere) keeps
    its zips."""
    entries = sys.path if path is None else path
    dropped = [e for e in entries if _installed_twin(Path(e), version)]
    entries[:] = [e for e in entries if e not in dropped]
    return dropped


def _installed_twin(entry: Path, version: Callable[[str], str]) -> bool:
    if entry.suffix != ".zip" or entry.parent.parts[-2:] != ("python", "lib"):
        return False
    # By layout, not by spark_jars.spark_home() or own_spark_conf_dir(): both may import
    # pyspark, which here would load it from the very zip this decides on.
    package = entry.parent.parent.parent  # $SPARK_HOME: pip's pyspark package, or not
    if package.name != "pyspark" or not (package / "__init__.py").is_file():
        return False
    if entry.name == "pyspark.zip":
        return True
    prefix = "py4j-"
    if not entry.name.startswith(prefix) or not entry.name.endswith("-src.zip"):
        return False
    try:
        return version("py4j") == entry.name[len(prefix):-len("-src.zip")]
    except importlib.metadata.PackageNotFoundError:
        return False

"""The Spark jars of the local cache, as a cluster's libraries would have them.

Interim: until the jar cache (`relay.spark_jars.cached_jars`, `outbox-relay jars`) is on
main, the jars come from Ivy's cache of earlier `spark.jars.packages` resolutions, less
the artifacts pyspark ships itself (Ivy's directory also keeps other resolutions' copies).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

IVY_JARS = Path.home() / ".ivy2.5.2" / "jars"
_NAME = re.compile(r"^(?P<name>.+?)-\d[\w.+-]*\.jar$")


def _artifact(file_name: str) -> str:
    # Ivy names its copies group_artifact-version.jar; pyspark's are artifact-version.jar.
    match = _NAME.match(file_name.split("_", 1)[-1] if "_" in file_name else file_name)
    return match["name"] if match else file_name


def _pyspark_artifacts() -> set[str]:
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.submodule_search_locations, "pyspark is installed"
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    return {_artifact(p.name) for p in jars.glob("*.jar")}


def cached_jars() -> list[Path]:
    """Absolute paths of the cached jars of relay.packages and their dependencies."""
    shipped = _pyspark_artifacts()
    jars = sorted(p.resolve() for p in IVY_JARS.glob("*.jar") if _artifact(p.name) not in shipped)
    assert jars, f"no cached jars in {IVY_JARS}: run the relay once with resolve_packages"
    return jars


def jar_of(coordinate: str, jars: list[Path]) -> Path:
    """The cached jar of a Maven coordinate group:artifact:version."""
    _, artifact, version = coordinate.split(":")
    found = [p for p in jars if p.name.endswith(f"{artifact}-{version}.jar")]
    assert len(found) == 1, f"{coordinate}: one cached jar expected, got {found}"
    return found[0]

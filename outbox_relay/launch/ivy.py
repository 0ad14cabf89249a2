"""Apache Ivy, as pyspark ships it, resolving from Maven Central alone into the user's cache.

Spark's own `spark.jars.packages` resolves again at every start, tries several other
repositories first and prints its report each time. Here a resolution runs once, its
output goes to a log file, and a failure is one line naming the artifact Ivy missed.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from outbox_relay.errors import RelayError
from outbox_relay.launch.cache import cache_dir, file_lock

IVY_TIMEOUT_S = 600.0
MARKER = ".resolved"
# Maven Central only: the `ibiblio` resolver's default root, no local or other repositories.
_SETTINGS = """<ivysettings>
  <settings defaultResolver="central"/>
  <resolvers><ibiblio name="central" m2compatible="true"/></resolvers>
</ivysettings>
"""


class ResolveError(RelayError):
    """A Maven artifact could not be downloaded."""


def resolve_once(target: Path, fill: Callable[[Path, Path], list[str]]) -> list[Path]:
    """The files of a complete resolution into `target`, resolving on first use only.

    `fill(partial, log)` resolves into the empty directory `partial`, with Ivy's output
    in `log`, and returns the paths (relative to it) it keeps. `target` appears, its
    marker listing them, only after that succeeded, under a lock across processes: an
    interrupted download is thrown away and redone, never a broken classpath.
    """
    marker = target / MARKER
    if not marker.is_file():
        with file_lock(target.parent / f".{target.name}.lock"):
            if not marker.is_file():
                partial = target.with_name(target.name + ".partial")
                shutil.rmtree(partial, ignore_errors=True)
                partial.mkdir(parents=True)
                log = target.with_name(target.name + ".ivy.log")
                log.write_text("")
                try:
                    kept = fill(partial, log)
                except BaseException:
                    shutil.rmtree(partial, ignore_errors=True)
                    raise
                (partial / MARKER).write_text("".join(f"{k}\n" for k in kept))
                shutil.rmtree(target, ignore_errors=True)
                partial.rename(target)
    return [target / name for name in marker.read_text().split()]


def ivy_jar() -> Path:
    """The Ivy jar bundled with pyspark (found by glob: its version follows Spark's)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ResolveError("pyspark is not installed; its bundled Ivy jar resolves the jars")
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    found = sorted(jars.glob("ivy-*.jar"))
    if not found:
        raise ResolveError(f"no ivy-*.jar in {jars}")
    return found[-1]


def java_executable() -> str:
    """`$JAVA_HOME/bin/java` when set (the JVM Spark uses too), else `java` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise ResolveError("no java executable: set JAVA_HOME or put java on PATH")
    return found


def settings_file() -> Path:
    path = cache_dir() / "ivysettings-central.xml"
    if not path.is_file() or path.read_text() != _SETTINGS:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_SETTINGS)
    return path


def retrieve(what: list[str], retrieve_pattern: str, log: Path, name: str) -> None:
    """Run Ivy with `what` (`-dependency g a v -confs c`, or `-ivy module.xml`), copying
    every resolved artifact to `retrieve_pattern`; Ivy's output is appended to `log`."""
    argv = [
        java_executable(), "-jar", str(ivy_jar()),
        "-settings", str(settings_file()),
        *what,
        "-cache", str(cache_dir() / "ivy"),
        "-retrieve", retrieve_pattern,
    ]  # fmt: skip
    try:
        with log.open("a") as out:
            result = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, timeout=IVY_TIMEOUT_S, check=False
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ResolveError(f"could not resolve {name}: {exc}") from exc
    if result.returncode != 0:
        raise ResolveError(f"could not resolve {name}: {_ivy_reason(log)} (log: {log})")


def _ivy_reason(log: Path) -> str:
    """The most telling line of Ivy's output, e.g. ':: group#artifact;ver: not found'."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    for line in reversed(lines):
        if line.startswith("::") and ("not found" in line or "FAILED" in line):
            return line.strip(": ")
    errors = [line for line in lines if "ERROR" in line or "Exception" in line]
    return errors[-1] if errors else "ivy exited with an error"

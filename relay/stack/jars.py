"""Resolve and cache the Apache Kafka broker jars with the Ivy that ships in pyspark."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

from relay import packages
from relay.stack.paths import cache_dir
from relay.stack.proc import StackError, file_lock

_MARKER = ".resolved"
_RETRIEVE_PATTERN = "[artifact]-[revision](-[classifier]).[ext]"
_IVY_TIMEOUT_S = 600.0


def ivy_jar() -> Path:
    """The Ivy jar bundled with pyspark (found by glob: its version follows Spark's)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("pyspark is not installed; its bundled Ivy jar resolves the Kafka jars")
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    found = sorted(jars.glob("ivy-*.jar"))
    if not found:
        raise StackError(f"no ivy-*.jar in {jars}")
    return found[-1]


def java_executable() -> str:
    """`$JAVA_HOME/bin/java` when set (the JVM Spark uses too), else `java` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise StackError("no java executable: set JAVA_HOME or put java on PATH")
    return found


def split_coordinate(coordinate: str) -> tuple[str, str, str]:
    group, artifact, version = coordinate.split(":")
    return group, artifact, version


def slf4j_binding(jar_names: list[str]) -> tuple[str, str, str] | None:
    """The log4j2 binding matching the resolved slf4j-api, as (group, artifact, version).

    Kafka's pom leaves the binding to the distribution's lib/ dir, so without it the
    broker would log nothing at all. The binding must match both the slf4j major
    version and the log4j-core version that came with the broker.
    """
    slf4j = _version_of("slf4j-api", jar_names)
    log4j = _version_of("log4j-core", jar_names)
    if slf4j is None or log4j is None:
        return None
    artifact = "log4j-slf4j-impl" if slf4j.startswith("1.") else "log4j-slf4j2-impl"
    return "org.apache.logging.log4j", artifact, log4j


def _version_of(artifact: str, jar_names: list[str]) -> str | None:
    pattern = re.compile(rf"^{re.escape(artifact)}-(\d[^-]*(?:-[A-Za-z0-9.]+)?)\.jar$")
    for name in jar_names:
        match = pattern.match(name)
        if match:
            return match.group(1)
    return None


def kafka_jars_dir(coordinate: str = packages.KAFKA_BROKER_ARTIFACT) -> Path:
    """The directory holding every jar the broker needs, downloading it on first use.

    A marker file is written only after a complete resolution, so an interrupted
    download is thrown away and redone instead of yielding a broken classpath.
    """
    _, artifact, version = split_coordinate(coordinate)
    root = cache_dir()
    target = root / f"{artifact}-{version}"
    if (target / _MARKER).is_file():
        return target
    with file_lock(root / f".{artifact}-{version}.lock"):
        if (target / _MARKER).is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        log = root / f"{artifact}-{version}.ivy.log"
        log.write_text("")
        try:
            _retrieve(coordinate, "default", target, log)
            binding = slf4j_binding(sorted(p.name for p in target.glob("*.jar")))
            if binding is not None:
                # `master` is just the artifact: its own deps already came with Kafka.
                _retrieve(":".join(binding), "master", target, log)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        (target / _MARKER).write_text(coordinate + "\n")
    return target


def _retrieve(coordinate: str, confs: str, target: Path, log: Path) -> None:
    group, artifact, version = split_coordinate(coordinate)
    argv = [
        java_executable(), "-jar", str(ivy_jar()),
        "-dependency", group, artifact, version,
        "-confs", confs,
        "-cache", str(cache_dir() / "ivy"),
        "-retrieve", str(target / _RETRIEVE_PATTERN),
    ]  # fmt: skip
    try:
        with log.open("a") as out:
            result = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, timeout=_IVY_TIMEOUT_S, check=False
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StackError(f"could not resolve {coordinate}: {exc}") from exc
    if result.returncode != 0:
        raise StackError(f"could not resolve {coordinate}: {_ivy_reason(log)} (log: {log})")


def _ivy_reason(log: Path) -> str:
    """The most telling line of Ivy's output, e.g. ':: group#artifact;ver: not found'."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    for line in reversed(lines):
        if line.startswith("::") and ("not found" in line or "FAILED" in line):
            return line.strip(": ")
    errors = [line for line in lines if "ERROR" in line or "Exception" in line]
    return errors[-1] if errors else "ivy exited with an error"

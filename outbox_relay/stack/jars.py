"""Resolve and cache the Apache Kafka broker jars with the Ivy that ships in pyspark."""

from __future__ import annotations

import re
from pathlib import Path

from outbox_relay.launch import ivy, packages
from outbox_relay.launch.cache import cache_dir
from outbox_relay.stack.proc import StackError

_RETRIEVE_PATTERN = "[artifact]-[revision](-[classifier]).[ext]"


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
    """The directory holding every jar the broker needs, downloading it on first use."""
    _, artifact, version = split_coordinate(coordinate)
    target = cache_dir() / f"{artifact}-{version}"

    def fill(partial: Path, log: Path) -> list[str]:
        _retrieve(coordinate, "default", partial, log)
        binding = slf4j_binding(sorted(p.name for p in partial.glob("*.jar")))
        if binding is not None:
            # `master` is just the artifact: its own deps already came with Kafka.
            _retrieve(":".join(binding), "master", partial, log)
        return sorted(p.name for p in partial.glob("*.jar"))

    ivy.resolve_once(target, fill)
    return target


def _retrieve(coordinate: str, confs: str, target: Path, log: Path) -> None:
    group, artifact, version = split_coordinate(coordinate)
    try:
        ivy.retrieve(
            ["-dependency", group, artifact, version, "-confs", confs],
            str(target / _RETRIEVE_PATTERN), log, coordinate,
        )
    except ivy.ResolveError as exc:
        raise StackError(str(exc)) from None

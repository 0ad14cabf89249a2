"""The relay's Spark packages as jar files in the user's cache, given to Spark through
its own configuration: `spark.jars`, in the builder or in `spark-defaults.conf`.

They are resolved once, from Maven Central alone (outbox_relay.launch.ivy), on set-up (`outbox-relay
jars --install`, run by `make setup`) or on first use. Later starts read the cache: no
resolver runs and nothing of it is printed, and `spark-submit jobs/relay.py` finds the
jars in `spark-defaults.conf`, so its driver needs no relaunch.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path

from outbox_relay.launch import ivy
from outbox_relay.launch.cache import cache_dir
from outbox_relay.launch.packages import SPARK_PACKAGES, SPARK_VERSION

log = logging.getLogger(__name__)

_RETRIEVE_PATTERN = "[organisation]/[artifact]/[artifact]-[revision](-[classifier]).[ext]"
BEGIN = "# >>> outbox-relay jars: written by `outbox-relay jars --install` >>>"
END = "# <<< outbox-relay jars <<<"
# The driver JVM that spark-submit starts compiles with C1 only. Its C2 compiler spent
# 2.3 of the 5.8 CPU-s that a driver took to start on two cores, beside its main thread:
# Python started 3.2 s after launch with it and 2.4-2.6 s without, and the JVM used
# 2.7-3.6 CPU-s. Peak speed is what C1 gives up, in the driver's own code and, under a
# local master, its executors': a relay sends its backlogs with the driver's producer
# there (relay.backlog_lane "auto"). Only in pip's pyspark (this file is its own), only
# under spark-submit (a session built from Python passes the relay's own driver options),
# and not when the file sets the key itself; `--driver-java-options` overrides it.
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
_DRIVER_OPTIONS_KEY = "spark.driver.extraJavaOptions"


def jars_dir() -> Path:
    key = hashlib.sha256("\n".join(SPARK_PACKAGES).encode()).hexdigest()[:12]
    return cache_dir() / f"spark-jars-{SPARK_VERSION}-{key}"


def cached_jars() -> list[Path]:
    """The jars of outbox_relay.launch.packages and their dependencies, resolving them on first use.

    Jars the Spark distribution already has (by artifact, whatever the version) are left
    out: Spark runs with the versions it was built with, and two of one library on a
    classpath is a gamble.
    """
    return ivy.resolve_once(jars_dir(), _fill)


def _fill(partial: Path, ivy_log: Path) -> list[str]:
    log.info("resolving the Spark packages once, from Maven Central, into %s", jars_dir())
    module = partial / "module.xml"
    module.write_text(_module_xml())
    ivy.retrieve(["-ivy", str(module), "-confs", "default"], str(partial / _RETRIEVE_PATTERN),
                 ivy_log, "the relay's Spark packages")
    module.unlink()
    provided = {p.name for p in spark_home_jars()}
    kept: list[str] = []
    for jar in sorted(partial.rglob("*.jar")):
        if _in_distribution(jar.parent.name, provided):
            jar.unlink()
        else:
            kept.append(str(jar.relative_to(partial)))
    return kept


def _module_xml() -> str:
    deps = "\n".join(
        f'    <dependency org="{g}" name="{a}" rev="{v}" conf="default->default"/>'
        for g, a, v in (c.split(":") for c in SPARK_PACKAGES)
    )
    # As spark-submit --packages does: Scala comes with Spark, never from a package.
    return f"""<ivy-module version="2.0">
  <info organisation="outbox-relay" module="spark-jars" revision="1"/>
  <configurations><conf name="default"/></configurations>
  <dependencies>
{deps}
    <exclude org="org.scala-lang" module="scala-library"/>
  </dependencies>
</ivy-module>
"""


def _in_distribution(artifact: str, provided: set[str]) -> bool:
    pattern = re.compile(rf"^{re.escape(artifact)}-\d[^/]*\.jar$")
    return any(pattern.match(name) for name in provided)


def spark_home() -> Path:
    configured = os.environ.get("SPARK_HOME")
    if configured:
        return Path(configured)
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def spark_home_jars() -> list[Path]:
    return sorted((spark_home() / "jars").glob("*.jar"))


def spark_conf_dir() -> Path:
    configured = os.environ.get("SPARK_CONF_DIR")
    return Path(configured) if configured else spark_home() / "conf"


def own_spark_conf_dir() -> bool:
    """Whether the Spark configuration directory is the pip-installed pyspark's own: only
    then may a first use write into it unasked (a shared Spark install is the admin's)."""
    if os.environ.get("SPARK_CONF_DIR"):
        return False
    import pyspark

    return spark_home().resolve() == Path(pyspark.__file__).resolve().parent


def has_relay_jars(spark_jars: str | None, spark_packages: str | None) -> bool:
    """Whether a Spark configuration already brings the relay's jars (by file name, or
    as `--packages`)."""
    names = {Path(j).name for j in (spark_jars or "").split(",") if j}
    if {p.name for p in cached_jars()} <= names:
        return True
    packages = set((spark_packages or "").split(","))
    return set(SPARK_PACKAGES) <= packages


def install_spark_defaults(conf_dir: Path | None = None) -> Path:
    """Write `spark.jars` with the cached jars into `spark-defaults.conf`, in a block of
    its own, with the driver's DRIVER_JAVA_OPTIONS unless the file sets its own; every
    other line of the file stays as it was. Refuses a file whose own `spark.jars` line
    would conflict: the error says what to add by hand."""
    path = (conf_dir or spark_conf_dir()) / "spark-defaults.conf"
    text = path.read_text() if path.is_file() else ""
    lines = [f"spark.jars {','.join(str(j) for j in cached_jars())}"]
    around = _around_block(text)
    if not _sets("".join(around) if around else text, _DRIVER_OPTIONS_KEY):
        lines.append(f"{_DRIVER_OPTIONS_KEY} {DRIVER_JAVA_OPTIONS}")
    block = "\n".join([BEGIN, *lines, END]) + "\n"
    if around:
        head, tail = around
        text = head + block + tail.lstrip("\n")
    elif _sets(text, "spark.jars"):
        raise ivy.ResolveError(
            f"{path} sets spark.jars already: add the relay's jars to it "
            "(`outbox-relay jars` prints them), or pass --jars \"$(outbox-relay jars)\""
        )
    else:
        text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _around_block(text: str) -> tuple[str, str] | None:
    """What the file holds before and after the relay's block, if it has one."""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head, rest.split(END, 1)[1]
    return None


def _sets(text: str, key: str) -> bool:
    """Whether a line of the properties file `text` sets `key`."""
    return re.search(rf"(?m)^\s*{re.escape(key)}[\s=:]", text) is not None

"""The relay process's interpreter (outbox_relay.launch.interpreter): its collector's
thresholds, raised, and still a collector that frees the reference cycles a long-running
relay makes; and pyspark imported from the installed package, not spark-submit's zips."""

from __future__ import annotations

import gc
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox_relay.launch.interpreter import (
    GEN0_THRESHOLD,
    prefer_installed_pyspark,
    tune_collector,
)


@pytest.fixture
def tuned() -> Iterator[None]:
    before = gc.get_threshold()
    was_enabled = gc.isenabled()
    gc.enable()
    tune_collector()
    try:
        yield
    finally:
        gc.set_threshold(*before)
        if not was_enabled:
            gc.disable()


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_young_collections_are_rarer_than_by_default(tuned: None) -> None:
    young, *older = gc.get_threshold()
    assert young == GEN0_THRESHOLD > 700
    assert older == [10, 10]


def test_cycles_are_still_freed_without_an_explicit_collection(tuned: None) -> None:
    gc.collect()
    made = 4 * GEN0_THRESHOLD
    refs = []
    for _ in range(made):
        node = _Node()
        refs.append(weakref.ref(node))
        del node
    alive = sum(ref() is not None for ref in refs)
    # Each _Node is two containers (the object, its __dict__): what waits is at most
    # the young generation's allocations since its last collection.
    assert alive <= GEN0_THRESHOLD, f"{alive} of {made} cycles still alive"
    assert alive < made


def _spark_home(root: Path, *, installed: bool) -> Path:
    """$SPARK_HOME/python/lib with pyspark's and py4j's zips; `installed`: the home is
    pip's pyspark package (it has an __init__.py), else a Spark of its own."""
    home = root / "pyspark"
    lib = home / "python" / "lib"
    lib.mkdir(parents=True)
    for name in ("pyspark.zip", "py4j-0.10.9.9-src.zip"):
        (lib / name).touch()
    if installed:
        (home / "__init__.py").touch()
    return lib


def test_pips_pyspark_zips_are_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    lib = _spark_home(tmp_path / "site-packages", installed=True)
    cluster = _spark_home(tmp_path / "opt", installed=False)
    other = tmp_path / "app.zip"
    path = [str(tmp_path), str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"),
            str(cluster / "pyspark.zip"), str(cluster / "py4j-0.10.9.9-src.zip"), str(other)]
    dropped = prefer_installed_pyspark(path, version=lambda _: "0.10.9.9")
    assert dropped == [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    assert path == [str(tmp_path), str(cluster / "pyspark.zip"),
                    str(cluster / "py4j-0.10.9.9-src.zip"), str(other)]


def test_a_py4j_zip_of_another_version_than_the_installed_one_is_kept(
        tmp_path: Path) -> None:
    lib = _spark_home(tmp_path, installed=True)
    path = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    prefer_installed_pyspark(path, version=lambda _: "0.10.9.7")
    assert path == [str(lib / "py4j-0.10.9.9-src.zip")]

    def absent(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    path = [str(lib / "py4j-0.10.9.9-src.zip")]
    prefer_installed_pyspark(path, version=absent)
    assert path == [str(lib / "py4j-0.10.9.9-src.zip")]


def test_this_venvs_pyspark_under_spark_submits_path_comes_from_the_package() -> None:
    """The real layout: this venv's pyspark with its own zips first on PYTHONPATH, as
    spark-submit starts the driver; after the call, pyspark and py4j are the installed
    packages' (bytecode cached), not the zips'."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    lib = Path(spec.origin).parent / "python" / "lib"
    zips = sorted(str(z) for z in lib.glob("*.zip"))
    assert len(zips) == 2, zips
    script = ("import sys; from outbox_relay.launch.interpreter import "
              "prefer_installed_pyspark as p; p(); import pyspark, py4j; "
              "print(pyspark.__file__); print(py4j.__file__)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*zips, str(Path.cwd())])}
    out = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    assert all(".zip" not in f and Path(f).is_file() for f in out), out

"""The Databricks bundle's artifact build (databricks.yml, artifacts.outbox_relay_wheel):
one wheel of this checkout in dist/, which the jobs install (resources/outbox_relay.job.yml,
../dist/*.whl), and the same file in the metrics app's source folder, which its
requirements.txt installs by path: an app installs what its folder holds, and nothing
of this project comes from a package index.

Wheels of earlier builds are removed from both first: a glob that matched two versions
would install both. So is setuptools' build/, which keeps modules deleted since the last
build and would put them in the wheel. Needs the `build` package in the Python that runs
it (`pip install build`).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"
APP = ROOT / "deploy" / "databricks-app"


def _required_wheel() -> str:
    """The wheel file the app's requirements.txt installs (its one `./*.whl` line)."""
    lines = (APP / "requirements.txt").read_text(encoding="utf-8").splitlines()
    (wheel,) = [line.split("[")[0] for line in lines if line.split("[")[0].endswith(".whl")]
    return wheel.removeprefix("./")


def main() -> int:
    if importlib.util.find_spec("build") is None:
        print(f"the bundle's wheel is built with the `build` package, which {sys.executable} "
              "lacks: pip install build", file=sys.stderr)
        return 1
    for old in [*DIST.glob("*.whl"), *APP.glob("*.whl")]:
        old.unlink()
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(DIST), str(ROOT)],
                   check=True)
    (wheel,) = DIST.glob("*.whl")
    if wheel.name != _required_wheel():
        print(f"{APP.relative_to(ROOT)}/requirements.txt installs {_required_wheel()}, but "
              f"this checkout builds {wheel.name}: name it there", file=sys.stderr)
        return 1
    shutil.copy2(wheel, APP / wheel.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())

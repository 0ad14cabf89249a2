"""Entry point for `spark-submit jobs/relay.py --config conf/<profile>.toml [--available-now]`."""

from __future__ import annotations

import sys
from pathlib import Path

# Under spark-submit the project may not be installed; make the package importable.
# A runner that executes the file without `__file__` (reported of Databricks' Python
# file tasks) has the package from the wheel, which the bundle installs on every task.
if "__file__" in globals():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from relay.app import main

if __name__ == "__main__":
    sys.exit(main())

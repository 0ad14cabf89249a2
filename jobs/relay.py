"""Entry point for `spark-submit jobs/relay.py --config conf/<profile>.toml [--available-now]`."""

from __future__ import annotations

import sys
from pathlib import Path

# Under spark-submit the project may not be installed; make the package importable.
# This puts the checkout ahead of an installed wheel, which is why the Databricks bundle
# runs the wheel's entry point instead of this file (docs/databricks.md). A runner that
# executes the file without `__file__` finds the package installed.
if "__file__" in globals():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from outbox_relay.app import main

if __name__ == "__main__":
    sys.exit(main())

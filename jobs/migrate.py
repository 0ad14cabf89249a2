"""Entry point for `spark-submit jobs/migrate.py --config conf/<profile>.toml`.

The same as `outbox-relay --config ... migrate`, which the Databricks bundle runs from its
wheel; a relay refuses a stale schema. The migrations are the SQL files of outbox_relay/schemas/,
shipped in the wheel too.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Under spark-submit the project may not be installed; make the package importable.
# This puts the checkout ahead of an installed wheel, which is why the Databricks bundle
# runs the wheel's entry point instead of this file (docs/databricks.md). A runner that
# executes the file without `__file__` finds the package installed.
if "__file__" in globals():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from outbox_relay.cli import main

COMMAND = "migrate"

if __name__ == "__main__":
    sys.exit(main([*sys.argv[1:], COMMAND]))

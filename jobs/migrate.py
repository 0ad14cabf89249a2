"""Entry point for `spark-submit jobs/migrate.py --config conf/<profile>.toml`.

The same as `outbox-relay --config ... migrate`; the Databricks bundle runs it as the
task before the relay, which refuses a stale schema. The migrations are the SQL files
of relay/schemas/, shipped in the wheel too.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Under spark-submit the project may not be installed; make the package importable.
# A runner that executes the file without `__file__` (reported of Databricks' Python
# file tasks) has the package from the wheel, which the bundle installs on every task.
if "__file__" in globals():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from relay.cli import main

COMMAND = "migrate"

if __name__ == "__main__":
    sys.exit(main([*sys.argv[1:], COMMAND]))

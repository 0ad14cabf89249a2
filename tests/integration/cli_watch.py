"""``python -m tests.integration.cli_watch REPORT ARGS...``: runs ``outbox-relay ARGS`` and
writes to REPORT (JSON) every process it started and every Spark module it imported.

The commands that only look must start no JVM: pyspark starts one through a
subprocess (spark-submit, then java), which Python's audit hooks see, and the modules
left in sys.modules show whether pyspark, py4j or delta-spark was imported at all.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SPAWNS = ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.fork")
SPARK_MODULES = ("pyspark", "py4j", "delta")  # `delta` is delta-spark's; deltalake is not


def main() -> int:
    report, args = Path(sys.argv[1]), sys.argv[2:]
    spawned: list[str] = []

    def hook(event: str, payload: tuple[Any, ...]) -> None:
        if event in SPAWNS:
            spawned.append(f"{event} {payload!r}"[:500])

    sys.addaudithook(hook)
    from outbox_relay.cli import main as cli

    code = 1
    try:
        code = cli(args)
    finally:
        spark = sorted(m for m in sys.modules if m.split(".")[0] in SPARK_MODULES)
        report.write_text(json.dumps({"spawned": spawned, "spark_modules": spark}))
    return code


if __name__ == "__main__":
    sys.exit(main())

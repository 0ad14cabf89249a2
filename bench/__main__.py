"""``python -m bench run [--only W1,LAT] [--quick] [--force] [--out DIR]`` (``make bench``):
the default run, bench/run.py. ``python -m bench report`` writes bench-default.md again
from bench-default.json. The run refuses a busy machine unless ``--force``
(bench/probes/quiet.py), and records it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.run import PARTS, run
from bench.stack import REPO


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the default benchmark and write its report")
    r.add_argument("--only", help=f"comma-separated parts of {', '.join(PARTS)} (default: all)")
    r.add_argument("--quick", action="store_true",
                   help="check the benchmark at a tiny scale, in a scratch database")
    r.add_argument("--force", action="store_true",
                   help="start on a busy machine anyway; the report says so")
    r.add_argument("--out", help="where the report goes (default: reports/, or the quick "
                   "run's work folder)")
    rep = sub.add_parser("report", help="write bench-default.md again from its .json")
    rep.add_argument("--out", default=str(REPO / "reports"))
    args = p.parse_args(argv)
    if args.command == "report":
        from bench.report.md import write

        out = Path(args.out)
        write(json.loads((out / "bench-default.json").read_text()), out)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

"""Changes proposed for the relay, applied at run time for measuring.

``python -m bench run --proposals`` runs the relay a second time with these applied
(through ``bench/hooks/sitecustomize.py`` in the relay's processes), so the report
shows what each buys, measured in the same run. Nothing here changes relay/.

* ``claim``: bench/sqlexp.py's one-pass claim in place of relay/control/claims.py's
  CLAIM (one scan in id order over every locked topic instead of one per topic).

Proposals measured here earlier and since adopted by the relay: the linear murmur2
expression (relay/data/partitioning.py), the problem check only where a problem is
possible, and the unordered ledger arrays of the finish (relay/control/claims.py).
"""

from __future__ import annotations

import os

ENV = "BENCH_PROPOSALS"


def apply() -> list[str]:
    """Apply the proposals to the relay's modules; returns their names."""
    from bench import sqlexp
    from relay.control import claims

    claim = sqlexp.proposed_claim()
    if claim is None:
        return []
    claims.CLAIM = claim
    return ["claim"]


def apply_if_requested() -> list[str]:
    return apply() if os.environ.get(ENV) == "1" else []

"""Changes proposed for files the bench does not own, applied at run time for measuring.

``python -m bench run --proposals`` runs the relay a second time with these applied
(through ``bench/hooks/sitecustomize.py`` in the relay's processes), so the report
shows what each proposal buys, measured in the same run. Nothing here changes relay/.

* ``claim``, ``finish`` (with BENCH_PROPOSALS_SQL=1): the statements of
  bench/sqlexp.py in place of relay/control/claims.py's CLAIM and FINISH_SESSIONS.
* ``murmur2``: relay/data/partitioning.py's ``murmur2_col`` names the fold's result
  ``h`` again in every later step, so the expression tree holds 32 copies of the fold
  over the key's bytes. Spark analyses, optimises and generates code for that tree
  on every micro-batch: 1-3 s a batch even when no row has a partition_key. The
  version below does the tail and the final mix inside lambdas (a lambda variable is
  a reference, not a copy): same bits, a tree 17 times smaller.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

ENV = "BENCH_PROPOSALS"
SQL_ENV = "BENCH_PROPOSALS_SQL"


def murmur2_col(data: Column) -> Column:
    """Kafka's murmur2 of a binary column, as an unsigned 32-bit bigint (linear tree)."""
    from relay.data.partitioning import _M, _MASK, _SEED

    def mul(x: Column) -> Column:
        return (x * F.lit(_M)).bitwiseAND(F.lit(_MASK))

    hx = F.hex(data)

    def byte(index: Column) -> Column:
        return F.conv(F.substring(hx, index * 2 + 1, F.lit(2)), 16, 10).cast("bigint")

    length = F.octet_length(data).cast("bigint")
    blocks = F.floor(length / 4).cast("int")
    indices = F.when(blocks > 0, F.sequence(F.lit(0), blocks - 1)).otherwise(
        F.array().cast("array<int>")
    )

    def block(h: Column, i: Column) -> Column:
        base = i * 4
        k = (
            byte(base)
            .bitwiseOR(F.shiftleft(byte(base + 1), 8))
            .bitwiseOR(F.shiftleft(byte(base + 2), 16))
            .bitwiseOR(F.shiftleft(byte(base + 3), 24))
        )
        k = mul(k)
        k = k.bitwiseXOR(F.shiftright(k, 24))
        k = mul(k)
        return mul(h).bitwiseXOR(k)

    tail = (blocks * 4).cast("int")
    rem = length % 4
    steps: list[Callable[[Column], Column]] = [
        lambda h: F.when(rem >= 3, h.bitwiseXOR(F.shiftleft(byte(tail + 2), 16))).otherwise(h),
        lambda h: F.when(rem >= 2, h.bitwiseXOR(F.shiftleft(byte(tail + 1), 8))).otherwise(h),
        lambda h: F.when(rem >= 1, mul(h.bitwiseXOR(byte(tail)))).otherwise(h),
        lambda h: mul(h.bitwiseXOR(F.shiftright(h, 13))),
        lambda h: h.bitwiseXOR(F.shiftright(h, 15)),
    ]
    h = F.aggregate(indices, F.lit(_SEED).bitwiseXOR(length), block)
    for step in steps:
        # A one-element fold binds h to a lambda variable: each step names it once.
        h = F.aggregate(F.array(F.lit(0)), h, _ignore_element(step))
    return h


def _ignore_element(step: Callable[[Column], Column]) -> Callable[[Column, Column], Column]:
    return lambda acc, _x: step(acc)


def apply() -> list[str]:
    """Apply the proposals to the relay's modules; returns their names.

    The SQL proposals (bench/sqlexp.py) only with BENCH_PROPOSALS_SQL=1.
    """
    from relay.data import partitioning

    partitioning.murmur2_col = murmur2_col
    applied = ["murmur2"]
    if os.environ.get(SQL_ENV) == "1":
        from bench import sqlexp
        from relay.control import claims

        claim, finish = sqlexp.proposed_claim(), sqlexp.proposed_finish()
        if claim is not None:
            claims.CLAIM = claim
            applied.append("claim")
        if finish is not None:
            claims.FINISH_SESSIONS = finish
            applied.append("finish")
    return applied


def apply_if_requested() -> list[str]:
    return apply() if os.environ.get(ENV) == "1" else []

"""Class histograms of the driver JVM (`jcmd GC.class_histogram`): what its heap holds,
by class, so that a difference in W4's retained heap can be named, not only measured."""

from __future__ import annotations

import re

# "   1:        123456       12345678  [B (java.base@17.0.15)"
_ROW = re.compile(r"^\s*\d+:\s+(\d+)\s+(\d+)\s+(\S+)", re.MULTILINE)
TOP = 40


def parse(text: str) -> dict[str, int]:
    """class name -> bytes of its live instances."""
    return {m[3]: int(m[2]) for m in _ROW.finditer(text)}


def top(classes: dict[str, int], n: int = TOP) -> dict[str, float]:
    """The `n` largest classes, in MB."""
    largest = sorted(classes.items(), key=lambda kv: -kv[1])[:n]
    return {name: round(b / 2**20, 2) for name, b in largest}


def growth(before: dict[str, float], after: dict[str, float], n: int = 8
           ) -> list[tuple[str, float, float]]:
    """(class, MB before, MB after) of the `n` classes that grew most, by 0.1 MB or more.
    A class outside a top list reads 0 there, so a growth it shows is an upper bound."""
    names = set(before) | set(after)
    grown = sorted(names, key=lambda c: before.get(c, 0.0) - after.get(c, 0.0))[:n]
    return [(c, before.get(c, 0.0), after.get(c, 0.0)) for c in grown
            if after.get(c, 0.0) - before.get(c, 0.0) >= 0.1]

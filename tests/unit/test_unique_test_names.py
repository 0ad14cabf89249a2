"""The test directories are not packages, so pytest imports every test module by its
basename: two of one name in different tiers stop the whole collection ("import file
mismatch"), which a run of one tier never shows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)
    assert not [n for n, k in names.items() if k > 1]

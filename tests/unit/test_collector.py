"""The relay's collector thresholds (outbox_relay.launch.collector): raised, and still a
collector that frees the reference cycles a long-running relay makes on its own."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from outbox_relay.launch.collector import GEN0_THRESHOLD, tune_collector


@pytest.fixture
def tuned() -> Iterator[None]:
    before = gc.get_threshold()
    was_enabled = gc.isenabled()
    gc.enable()
    tune_collector()
    try:
        yield
    finally:
        gc.set_threshold(*before)
        if not was_enabled:
            gc.disable()


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_young_collections_are_rarer_than_by_default(tuned: None) -> None:
    young, *older = gc.get_threshold()
    assert young == GEN0_THRESHOLD > 700
    assert older == [10, 10]


def test_cycles_are_still_freed_without_an_explicit_collection(tuned: None) -> None:
    gc.collect()
    made = 4 * GEN0_THRESHOLD
    refs = []
    for _ in range(made):
        node = _Node()
        refs.append(weakref.ref(node))
        del node
    alive = sum(ref() is not None for ref in refs)
    # Each _Node is two containers (the object, its __dict__): what waits is at most
    # the young generation's allocations since its last collection.
    assert alive <= GEN0_THRESHOLD, f"{alive} of {made} cycles still alive"
    assert alive < made

"""A process in which OpenTelemetry cannot be imported, as if it were not installed: the
text a test puts at the head of a `python -c` script (the unit and the integration tests
of trace context run the publisher in one). `Blocker.asked` counts the imports tried."""

BLOCK_OPENTELEMETRY = """
import importlib.abc
import sys

class Blocker(importlib.abc.MetaPathFinder):
    asked = 0

    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            Blocker.asked += 1
            raise ImportError(f"blocked for the test: {name}")
        return None

sys.meta_path.insert(0, Blocker())
"""

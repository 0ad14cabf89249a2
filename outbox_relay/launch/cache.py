"""The user's cache of downloaded jars (Spark packages, Kafka broker), shared by every
checkout and venv of the same user, and a lock that makes filling it safe across processes."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

CACHE_DIR_ENV = "RELAY_CACHE_DIR"


def cache_dir() -> Path:
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    return Path.home() / ".cache" / "outbox-relay"


# Guards the flock bookkeeping below; re-entrant so a thread holding a stack lock
# can call another locked operation (flock on a second descriptor of the same file
# would deadlock against ourselves).
_THREAD_LOCK = threading.RLock()
_HELD_LOCKS: dict[Path, int] = {}


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock across processes, so concurrent `up()` calls do not race."""
    import fcntl

    with _THREAD_LOCK:
        if path in _HELD_LOCKS:
            _HELD_LOCKS[path] += 1
            try:
                yield
            finally:
                _HELD_LOCKS[path] -= 1
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            _HELD_LOCKS[path] = 1
            try:
                yield
            finally:
                del _HELD_LOCKS[path]
                fcntl.flock(handle, fcntl.LOCK_UN)

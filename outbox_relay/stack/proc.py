"""Process and port helpers shared by the PostgreSQL and Kafka launchers."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from outbox_relay.errors import RelayError
from outbox_relay.exit_codes import ExitCode

HOST = "127.0.0.1"
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
SERVICE_PORTS_FROM = 10_000

# Popen handles of the services this interpreter launched. Holding on to them lets
# us reap a stopped broker (no zombie keeps its pid "alive") and keeps Popen's
# destructor from warning about a child that is meant to outlive the handle.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class StackError(RelayError):
    """A local service could not be provisioned, started or reached."""

    exit_code = ExitCode.STACK_FAILED


def ephemeral_port_range(source: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """The kernel's range of ports for outgoing connections, if it tells."""
    try:
        low, high = (int(part) for part in source.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def service_port_range(ephemeral: tuple[int, int] | None) -> range | None:
    """Where a service's ports are chosen: below the kernel's ephemeral range.

    A port in that range stops being ours the moment its service stops. Any outgoing
    connection on the machine may take it as its own port, and a client retrying the
    stopped service may even connect to itself through it. The service then comes back
    on other ports, which its clients are never told. None when the range leaves no room.
    """
    if ephemeral is None or ephemeral[0] - SERVICE_PORTS_FROM < 1000:
        return None
    return range(SERVICE_PORTS_FROM, ephemeral[0])


def pick_free_ports(count: int, ephemeral: tuple[int, int] | None = None) -> list[int]:
    """Distinct ports free right now on 127.0.0.1, outside the ephemeral range if possible."""
    candidates = service_port_range(ephemeral or ephemeral_port_range())
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            # All sockets stay bound until every port is chosen, so none repeats.
            _bind_free(sock, candidates)
        return [int(sock.getsockname()[1]) for sock in sockets]


def _bind_free(sock: socket.socket, candidates: range | None) -> None:
    """Binds `sock` to a free candidate port, else to one the kernel picks."""
    if candidates is not None:
        for port in random.sample(candidates, min(64, len(candidates))):
            with contextlib.suppress(OSError):
                sock.bind((HOST, port))
                return
    sock.bind((HOST, 0))


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        # Servers bind with SO_REUSEADDR; without it, TIME_WAIT leftovers of a
        # just-stopped service would make its own port look taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def process_matches(pid: int | None, marker: str) -> bool:
    """Whether `pid` is alive and `marker` is one of its command-line arguments.

    The marker (a path inside the stack dir) guards against acting on a recycled
    pid that now belongs to somebody else's process. Whole arguments are compared,
    so /a/stack never matches a process of /b/a/stack.
    """
    if pid is None or pid <= 0:
        return False
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        del _CHILDREN[pid]
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    # A zombie has an empty command line, so it never matches.
    return marker.encode() in cmdline.split(b"\0")


def spawn_detached(
    argv: Sequence[str], console_log: Path, cwd: Path, env: dict[str, str] | None = None
) -> int:
    """Start a long-running service in its own session so it survives our exit."""
    console_log.parent.mkdir(parents=True, exist_ok=True)
    with console_log.open("ab") as out:
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    _CHILDREN[child.pid] = child
    return child.pid


def process_gone(pid: int) -> bool:
    """Whether `pid` has finished exiting (absent, or a zombie awaiting its reaper).

    An exiting process drops its command line before it closes its sockets, so an
    empty cmdline alone does not yet mean its ports are free again.
    """
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        del _CHILDREN[pid]
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # Field 3, after the parenthesised command name (which may itself contain spaces).
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def terminate(pid: int | None, marker: str, timeout: float, hard: bool = False) -> None:
    """SIGTERM (or SIGKILL when `hard`), escalating to SIGKILL after `timeout`."""
    if not process_matches(pid, marker):
        return
    assert pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)
    if wait_for(lambda: process_gone(pid), timeout):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not wait_for(lambda: process_gone(pid), 10.0):
        raise StackError(f"process {pid} did not exit after SIGKILL")


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    kept = text.splitlines()[-lines:]
    return "\n".join(kept) if kept else f"(empty log {path})"


def failure(service: str, reason: str, *logs: Path) -> StackError:
    """An error naming the service, the reason and the end of its logs."""
    parts = [f"{service}: {reason}"]
    for log in logs:
        parts.append(f"--- last lines of {log} ---\n{tail(log)}")
    return StackError("\n".join(parts))

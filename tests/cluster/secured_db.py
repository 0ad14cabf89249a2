"""A PostgreSQL role that must give its password, on the shared stack whose pg_hba.conf
trusts every other connection from 127.0.0.1.

Under `trust` any password, or none, is accepted, so a relay that only the driver can
authenticate would prove nothing. One pg_hba line for this role alone, ahead of the trust
lines, makes the server demand SCRAM from it; every other role of the shared stack keeps
trust, so other test sessions on the stack are not affected. The line is removed again
at the end of the session.
"""

from __future__ import annotations

import contextlib
import fcntl
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg2

from outbox_relay.stack.paths import StackPaths

_MARK = "# outbox-relay cluster tier:"


@dataclass(frozen=True)
class SecuredRole:
    name: str
    password: str
    enforced: bool  # False: an external server whose pg_hba we cannot change


def _hba_file(admin_url: str) -> Path | None:
    """pg_hba.conf of the stack's own server, None for an external one."""
    conn = psycopg2.connect(admin_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW hba_file")
            path = Path(cur.fetchone()[0])
    finally:
        conn.close()
    own = StackPaths.resolve(None).pg_data.resolve()
    return path if path.resolve().parent == own else None


@contextlib.contextmanager
def _locked(hba: Path) -> Iterator[None]:
    with (hba.parent.parent / "hba-edit.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _edit(hba: Path, admin_url: str, role: str, add: bool) -> None:
    with _locked(hba):
        lines = hba.read_text(encoding="utf-8").splitlines(keepends=True)
        lines = [ln for ln in lines if f" {role} " not in ln and not ln.endswith(f" {role}\n")]
        if add:
            # First match wins in pg_hba.conf: this line must come before the trust lines.
            lines[:0] = [f"{_MARK} {role} must give its password\n",
                         f"host all {role} 127.0.0.1/32 scram-sha-256\n"]
        # Written in place: the server's account keeps owning the file.
        hba.write_text("".join(lines), encoding="utf-8")
        conn = psycopg2.connect(admin_url)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_reload_conf()")
                cur.execute("SELECT count(*) FROM pg_hba_file_rules WHERE error IS NOT NULL")
                assert cur.fetchone()[0] == 0, "pg_hba.conf has an error"
        finally:
            conn.close()


def refused_without_password(url: str) -> bool:
    """Whether the server turns the role away when it gives no password."""
    try:
        psycopg2.connect(url, connect_timeout=10).close()
    except psycopg2.OperationalError as exc:
        return "password" in str(exc)
    return False


@contextlib.contextmanager
def secured_role(admin_url: str) -> Iterator[SecuredRole]:
    """A login role (not a superuser) with a random password, required by pg_hba."""
    role = SecuredRole(f"relay_cluster_{uuid.uuid4().hex[:10]}", secrets.token_urlsafe(18),
                       enforced=False)
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    with conn.cursor() as cur:
        # Generated identifier and password; CREATE ROLE takes no bind parameters.
        cur.execute(f"CREATE ROLE {role.name} LOGIN PASSWORD '{role.password}'")
    hba = _hba_file(admin_url)
    try:
        if hba is not None:
            _edit(hba, admin_url, role.name, add=True)
            role = SecuredRole(role.name, role.password, enforced=True)
        yield role
    finally:
        if hba is not None:
            _edit(hba, admin_url, role.name, add=False)
        with conn.cursor() as cur:
            cur.execute(f"DROP ROLE IF EXISTS {role.name}")
        conn.close()

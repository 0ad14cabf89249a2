"""Real relay processes for the fault scenarios: their profiles, spark-submit in a
process group of their own, signals, and the tokens they lock with."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from outbox_relay.config import Config
from outbox_relay.config.load import build_config
from outbox_relay.config.models import MAX_DRAIN_LANES
from outbox_relay.control.liveness import APPLICATION_NAME as LIVENESS_APPLICATION
from outbox_relay.control.pending import SOURCE_APPLICATION
from outbox_relay.wiring import lane_token, process_token
from tests.faults.infra import query, scalar, wait_until
from tests.integration.process import write_profile

# What a frozen relay logs once it runs again after another took its lock. Frozen
# mid-write, its heartbeat finds the lock lost. Frozen just after the write, inside its
# delete's transaction, it held the topic's row: the thief skipped that topic until the
# server ended that idle transaction (postgres.idle_in_transaction_timeout_ms, below the
# lock timeout), took the lock after it, and the resumed relay found its delete failed:
# its rows stay and are sent again (clean-clone CI runs froze it there in scenarios 5 and 13).
SAW_IT = ("lock lost", "but its delete failed")
REPO = Path(__file__).resolve().parents[2]

# Environment variables the relay reads; a child gets only the ones a test passes, so a
# shell pointed at another stack (`eval "$(outbox-relay stack env)"`) can't redirect it.
_RELAY_ENV = (
    "RELAY_POSTGRES_URL", "RELAY_POSTGRES_PASSWORD", "RELAY_KAFKA_BOOTSTRAP_SERVERS",
    "RELAY_LEDGER_PATH", "RELAY_CHECKPOINT_PATH", "RELAY_SOURCE_NAME", "RELAY_FAILPOINTS",
    "RELAY_WATCH_PID", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET",
)


def relay_config(url: str, bootstrap: str, workdir: Path, *, topics: Sequence[str] | None = None,
                 source_name: str = "fault-relay", **sections: dict[str, Any]) -> Config:
    """A profile with short, test-sized timeouts; keyword sections override the defaults."""
    data: dict[str, Any] = {
        "postgres": {"url": url, "sslmode": "disable", "connect_timeout_s": 5},
        "kafka": {"bootstrap_servers": bootstrap, "delivery_timeout_ms": 20_000,
                  "request_timeout_ms": 10_000, "admin_timeout_s": 5},
        "ledger": {"path": str(workdir / "ledger"), "flush_interval_s": 2},
        "relay": {
            "source_name": source_name,
            "checkpoint_path": str(workdir / "checkpoint"),
            "poll_interval_s": 0.1,
            "lock_timeout_s": 5,
            "heartbeat_interval_s": 1,
            "backoff_base_s": 0.5,
            "backoff_max_s": 4,
            "available_now_deadline_s": 60,
            "include_topics": [_literal(t) for t in topics] if topics else [".*"],
        },
        "spark": {"shuffle_partitions": 2},
    }
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return build_config(data, env={})


def _literal(topic: str) -> str:
    import re

    return re.escape(topic)


def with_relay(config: Config, **values: Any) -> Config:
    return config.model_copy(update={"relay": config.relay.model_copy(update=values)})


class RelayProc:
    """`spark-submit jobs/relay.py` as its own process group, with its output in a file."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> int:
        """SIGKILL the whole group (the JVM, the Python driver and its workers)."""
        self.signal(signal.SIGKILL)
        code = self.proc.wait(timeout=60)
        wait_until(lambda: not _group_alive(self.proc.pid), 60, f"group of {self.name} to die")
        return code

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"relay {self.name} still running after {timeout_s:.0f} s\n{self.tail()}"
            ) from None

    def stop(self, timeout_s: float = 180) -> int:
        """Graceful stop (SIGTERM to the group); SIGKILL if it hangs."""
        if not self.alive():
            return int(self.proc.returncode)
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"relay {self.name} ignored SIGTERM\n{self.tail()}") from None

    def text(self) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 40) -> str:
        kept = [ln for ln in self.text().splitlines() if ln.strip() and "[Stage" not in ln]
        return f"--- {self.name} (last {lines} lines) ---\n" + "\n".join(kept[-lines:])


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Zombies of the group (reaped by init later) count as gone.
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def start_relay(config: Config, workdir: Path, name: str, *, available_now: bool = False,
                env: dict[str, str] | None = None, submit_args: Sequence[str] = (),
                cwd: Path = REPO) -> RelayProc:
    """Start a relay with `spark-submit jobs/relay.py`, as production does (docs/operating.md,
    "Launching with spark-submit"; the jars come from spark-defaults.conf), in a new process group.
    `submit_args` are spark-submit's own (e.g. `--master`); `cwd` is the driver's."""
    workdir.mkdir(parents=True, exist_ok=True)
    profile = write_profile(config, workdir / f"{name}.toml")
    submit = Path(sys.executable).parent / "spark-submit"
    assert submit.exists(), "spark-submit is installed with pyspark"
    child_env = {k: v for k, v in os.environ.items() if k not in _RELAY_ENV}
    child_env.update({"PYSPARK_PYTHON": sys.executable, **(env or {})})
    log = workdir / f"{name}.log"
    args = [str(submit), *submit_args, str(REPO / "jobs" / "relay.py"), "--config", str(profile)]
    if available_now:
        args.append("--available-now")
    with log.open("ab") as out:
        proc = subprocess.Popen(args, cwd=cwd, env=child_env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    return RelayProc(name, proc, log)


@contextlib.contextmanager
def relays() -> Iterator[list[RelayProc]]:
    """Every relay started in the block is killed at its end, whatever happened."""
    started: list[RelayProc] = []
    try:
        yield started
    finally:
        for r in started:
            if r.alive() or _group_alive(r.pid):
                with contextlib.suppress(Exception):
                    r.kill()


def tokens_of(url: str, source_name: str) -> set[str]:
    """Fencing tokens of a source's processes seen so far (tokens start with the source
    name); a drain lane's token counts as its process's."""
    rows = query(url, "SELECT DISTINCT token FROM fault_fence_events WHERE token LIKE %s "
                 "UNION SELECT DISTINCT new_owner FROM fault_lock_events WHERE new_owner LIKE %s",
                 (source_name + "@%", source_name + "@%"))
    return {process_token(t) for (t,) in rows if t}


def lane_tokens(token: str) -> list[str]:
    """The tokens one process may claim under: its own and every drain lane's."""
    return [token, *(lane_token(token, lane) for lane in range(MAX_DRAIN_LANES))]


def sources_connected(url: str) -> int:
    """How many relays have their streaming source polling this database."""
    return _connected(url, SOURCE_APPLICATION)


def liveness_connected(url: str) -> int:
    """How many relays hold their liveness in this database: each relay of it runs,
    with or without a streaming query (a relay of several databases starts a
    database's query only once it meets a backlog)."""
    return _connected(url, LIVENESS_APPLICATION)


def _connected(url: str, application: str) -> int:
    return int(scalar(url, "SELECT count(*) FROM pg_stat_activity "
                      "WHERE datname = current_database() AND application_name = %s",
                      (application,)))

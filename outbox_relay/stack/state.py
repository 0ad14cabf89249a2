"""The stack's memory between CLI invocations: ports and pids, as JSON."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class PostgresState:
    port: int
    pid: int | None = None


@dataclass
class KafkaState:
    port: int
    controller_port: int
    pid: int | None = None


@dataclass
class StackState:
    postgres: PostgresState | None = None
    kafka: KafkaState | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> StackState:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("stack state must be a JSON object")
        postgres = raw.get("postgres")
        kafka = raw.get("kafka")
        return cls(
            postgres=PostgresState(**postgres) if postgres else None,
            kafka=KafkaState(**kafka) if kafka else None,
        )


def load_state(path: Path) -> StackState:
    """The saved state, or an empty one if there is none or it is unreadable.

    An unreadable file only loses pids; we then never signal anything, which errs on
    the side of not killing processes we cannot prove are ours.
    """
    try:
        return StackState.from_json(path.read_text())
    except FileNotFoundError:
        return StackState()
    except (ValueError, TypeError):
        return StackState()


def save_state(path: Path, state: StackState) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(state.to_json())
    # Atomic replace: a reader never sees a half-written file.
    os.replace(tmp, path)

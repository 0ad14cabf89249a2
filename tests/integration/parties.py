"""A relay's control plane, without Spark: what a test needs to act as one relay."""

from __future__ import annotations

from outbox_relay.config import Config
from outbox_relay.control.claims import TopicLimits
from outbox_relay.wiring import control_plane


class Party:
    """One relay's locks, claims and parking under its own fencing token, wired as the
    relay wires them (outbox_relay.wiring.control_plane)."""

    def __init__(self, config: Config, token: str) -> None:
        plane = control_plane(config, token, f"test-{token}")
        self._heartbeat_db = plane.heartbeat_locks.db
        self.db, self.locks, self.claims = plane.db, plane.locks, plane.claims
        self.parking = plane.parking

    def claim(self, topic: str) -> list[str]:
        """Claims `topic` (already locked) and returns the new session ids."""
        batch = self.claims.claim([TopicLimits(topic, 1_000_000, False)], 100, 10_000_000)
        return [c.session_id for c in batch.sessions if c.session_id is not None]

    def close(self) -> None:
        self.db.close()
        self._heartbeat_db.close()

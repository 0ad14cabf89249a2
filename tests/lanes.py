"""The two lanes of the data plane (docs/how-it-works.md), for the tests of a guarantee
that both must keep: each such test runs on each. A small write goes through the
driver's producer unless the direct lane is off; then every write is a Spark job."""

from __future__ import annotations

from outbox_relay.config import Config

LANES = ("direct", "spark")


def on_lane(config: Config, lane: str) -> Config:
    """`config` whose small writes take `lane`."""
    relay = config.relay.model_copy(update={"direct_lane": lane == "direct"})
    return config.model_copy(update={"relay": relay})

"""The base of every profile model: an unknown key is an error (one that names it,
outbox_relay.config.load), and a loaded profile does not change."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

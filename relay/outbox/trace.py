"""Trace context for published messages: the W3C `traceparent` (and `tracestate`) of the
span current when the application publishes, so that a consumer can continue the trace.

OpenTelemetry is optional: without its API installed, or with no valid span current,
nothing is added. It is switched off per call (`trace_context=False`) or for the whole
process (OUTBOX_RELAY_TRACE_CONTEXT=off). The W3C propagator is used whatever global
propagator the application configured: the headers are the W3C ones by name.
"""

from __future__ import annotations

import functools
import os
from typing import Any

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
SWITCH = "OUTBOX_RELAY_TRACE_CONTEXT"
_OFF = {"0", "off", "false", "no"}


@functools.lru_cache(maxsize=1)
def _opentelemetry() -> tuple[Any, Any] | None:
    """OpenTelemetry's trace API and a W3C propagator, or None when it is not installed."""
    try:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )
    except ImportError:
        return None
    return trace, TraceContextTextMapPropagator()


def enabled(trace_context: bool) -> bool:
    """Whether this call writes trace context: the call's choice and the process's switch."""
    return trace_context and os.environ.get(SWITCH, "").strip().lower() not in _OFF


def trace_headers() -> dict[str, str]:
    """`traceparent` and, when set, `tracestate` of the current span; empty when there is
    none (or OpenTelemetry is not installed)."""
    otel = _opentelemetry()
    if otel is None:
        return {}
    trace, propagator = otel
    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagator.inject(carrier)
    return {name: carrier[name] for name in (TRACEPARENT, TRACESTATE) if carrier.get(name)}

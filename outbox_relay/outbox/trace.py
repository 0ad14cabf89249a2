"""Trace context for published messages: the W3C `traceparent` (and `tracestate`) of the
span current when the application publishes, so that a consumer can continue the trace.

OpenTelemetry is optional (the `otel` extra, opentelemetry-api): without its API
installed, or with no valid span current, nothing is added. It is imported at the first
publish that asks for trace context, never by `import outbox_relay`. A span that does not
record (sampled out) but has a valid context is propagated, with its sampled flag
unset, as W3C Trace Context asks.

It is switched off per call (`trace_context=False`) or for the whole process
(OUTBOX_RELAY_TRACE_CONTEXT=off; also 0, false, no). The W3C propagator is used whatever
global propagator the application configured: the headers are the W3C ones by name, the
names OpenTelemetry's Kafka instrumentations read.

The two headers are one unit: when the application set either itself (in any case), it
is kept and neither is added, so that a `tracestate` never travels with another trace's
`traceparent`. Nor are they added under a reserved header prefix that would cover their
names: the relay would refuse the row. They are stored in the row's headers, and so
count in every size check like the application's own.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from outbox_relay.errors import PublishError
from outbox_relay.rules.headers import is_reserved

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
NAMES = (TRACEPARENT, TRACESTATE)
SWITCH = "OUTBOX_RELAY_TRACE_CONTEXT"
_OFF = frozenset({"0", "off", "false", "no"})
_ON = frozenset({"", "1", "on", "true", "yes"})


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
    """Whether this call writes trace context: the call's choice and the process's switch.

    PublishError for a `trace_context` that is not a bool (None would read as off) and for
    a value of the switch that is neither on nor off (a typo would otherwise leave it on).
    """
    if not isinstance(trace_context, bool):
        raise PublishError(f"trace_context must be a bool, not {trace_context!r}")
    if not trace_context:
        return False
    raw = os.environ.get(SWITCH, "")
    switch = raw.strip().lower()
    if switch in _OFF:
        return False
    if switch in _ON:
        return True
    raise PublishError(f"{SWITCH}={raw!r} is neither off (0, off, false, no) nor on "
                       "(1, on, true, yes, or unset)")


def trace_headers() -> dict[str, str]:
    """`traceparent` and, when set, `tracestate` of the current span; empty when there is
    none, its context is invalid, or OpenTelemetry is not installed."""
    otel = _opentelemetry()
    if otel is None:
        return {}
    trace, propagator = otel
    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagator.inject(carrier)
    return {name: carrier[name] for name in NAMES if carrier.get(name)}


def for_message(context: Mapping[str, str], headers: Mapping[str, str] | None,
                prefix: str) -> dict[str, str]:
    """The trace context to add to a message whose own (checked) headers are `headers`:
    all of `context`, or none when the application set `traceparent` or `tracestate`
    itself (compared without case: HTTP and several Kafka instrumentations read them so)
    or when the reserved `prefix` covers one of their names."""
    if not context:
        return {}
    if headers and any(name.lower() in NAMES for name in headers):
        return {}
    if any(is_reserved(name, prefix) for name in context):
        return {}
    return dict(context)

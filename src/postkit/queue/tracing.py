"""The trace context a push records: the current OpenTelemetry span's, as a W3C carrier.

OpenTelemetry is optional (``pip install 'postkit-queue[otel]'``) and never imported here. A
span can be current only in a program that imported ``opentelemetry.trace`` (every tracer, the
SDK's too, comes from it), so a push first looks that module up in ``sys.modules``: a
dictionary lookup, and without OpenTelemetry nothing else happens. With it, the W3C
trace-context propagator writes the current span's ``traceparent`` and ``tracestate``; it is
made once, on the first push that has a span to propagate.

The carrier is the W3C one whatever propagator the application configured globally: the
worker reads it back with the same propagator, and a global one may add baggage, which is
application data that has no business in every job row.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from postkit.queue import limits

if TYPE_CHECKING:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_propagator: TraceContextTextMapPropagator | None = None


def w3c_propagator() -> TraceContextTextMapPropagator:
    """The W3C trace-context propagator, made once. Only for a program that imported
    ``opentelemetry.trace``: importing the propagator costs nothing more there."""
    global _propagator
    if _propagator is None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        _propagator = TraceContextTextMapPropagator()
    return _propagator


def current_trace_context() -> dict[str, str] | None:
    """The W3C carrier of the current span, ``{"traceparent": ..., "tracestate": ...}``, or None
    when no valid span is current (or OpenTelemetry is not in use).

    A valid span is propagated whether or not it is recording: its sampling decision travels
    in the traceparent's flags, as between any two services. A carrier too big for a job
    (:data:`~postkit.queue.limits.TRACE_CONTEXT_BYTES`, which only a tracestate of many
    vendors' entries can reach) loses its tracestate: tracing never makes a push fail."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    w3c_propagator().inject(carrier)
    # A traceparent alone is 55 characters: only a tracestate can make the carrier too big.
    if "tracestate" in carrier and (
        limits.trace_context_bytes(carrier) > limits.TRACE_CONTEXT_BYTES
    ):
        del carrier["tracestate"]
    return carrier or None


__all__ = ["current_trace_context", "w3c_propagator"]

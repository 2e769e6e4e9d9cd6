"""Each handler run in an OpenTelemetry span, linked to the trace that pushed its job.

The span is a CONSUMER span named ``process <queue>``, current while the handler runs (so the
handler's own spans are its children), with the messaging attributes (``messaging.system``
"postkit", ``messaging.destination.name`` the queue, ``messaging.message.id`` the job id,
``messaging.operation.type`` "process") and ``postkit.namespace``, ``postkit.attempt`` and
``postkit.outcome``: the outcome its settle had (completed, retried, dead_lettered, stale).
A handler that raised gets status ERROR with the exception recorded; one that ran past its
timeout gets status ERROR and no outcome (the heartbeat settled that attempt).

The span *links* to the pushing span rather than being its child, as OpenTelemetry's messaging
conventions advise for consumers: a job runs when it comes due, after retries that may be
hours or days after its push, and is claimed in a batch with the jobs of other traces. Each
run is a trace of its own that points back to its producer; a link to a context the worker
cannot parse is left out, and the job runs as any other.

OpenTelemetry is never imported here: without ``opentelemetry.trace`` in ``sys.modules`` no
tracer provider can be configured, so :func:`job_span` hands out one shared do-nothing context
manager, and :func:`failed` and :func:`settled` read one context variable.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING

from postkit import __version__
from postkit.queue import Job, Outcome
from postkit.queue.tracing import w3c_propagator

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

_NO_SPAN: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
_current: contextvars.ContextVar[_JobSpan | None] = contextvars.ContextVar(
    "postkit_job_span", default=None
)
_tracer: Tracer | None = None


class _JobSpan:
    """The span of the handler running in this context, and whether its outcome is known."""

    def __init__(self, trace: ModuleType, span: Span) -> None:
        self.trace = trace  # opentelemetry.trace
        self.span = span
        self.outcome_known = False


def job_span(job: Job, namespace: str) -> contextlib.AbstractContextManager[None]:
    """A context manager that runs its body, the handler of ``job`` and the settle of its
    failure, in the job's span (see the module docstring). A span that saw neither
    :func:`failed` nor :func:`settled` ends as completed: its handler returned, and its ack is
    batched with others after the span."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return _NO_SPAN
    return _traced(trace, job, namespace)


@contextlib.contextmanager
def _traced(trace: ModuleType, job: Job, namespace: str) -> Iterator[None]:
    global _tracer
    if _tracer is None:
        # A ProxyTracer until the application sets a provider; it follows the provider then.
        _tracer = trace.get_tracer("postkit", __version__)
    links = []
    if job.trace_context is not None:
        pushed = trace.get_current_span(w3c_propagator().extract(job.trace_context))
        if pushed.get_span_context().is_valid:
            links.append(trace.Link(pushed.get_span_context()))
    with _tracer.start_as_current_span(
        f"process {job.queue}",
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": "postkit",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            "messaging.operation.type": "process",
            "postkit.namespace": namespace,
            "postkit.attempt": job.attempts,
        },
    ) as span:
        state = _JobSpan(trace, span)
        token = _current.set(state)
        try:
            yield
        finally:
            _current.reset(token)
            if not state.outcome_known:
                span.set_attribute("postkit.outcome", Outcome.COMPLETED.value)


def failed(error: BaseException | str) -> None:
    """The handler running in this context raised ``error``, or (a str) ended so: its span
    gets status ERROR, and an exception is recorded on it."""
    state = _current.get()
    if state is None:
        return
    state.outcome_known = True
    if isinstance(error, BaseException):
        state.span.record_exception(error)
        error = f"{type(error).__name__}: {error}"
    state.span.set_status(state.trace.Status(state.trace.StatusCode.ERROR, error))


def settled(outcome: Outcome) -> None:
    """The job whose handler runs in this context was settled with ``outcome``."""
    state = _current.get()
    if state is None:
        return
    state.outcome_known = True
    state.span.set_attribute("postkit.outcome", outcome.value)


__all__ = ["failed", "job_span", "settled"]

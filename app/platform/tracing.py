"""OpenTelemetry for every gateway process: one trace per message (ADR 042).

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (the standard variable; the
SDK reads the other ``OTEL_*`` ones itself, ``OTEL_TRACES_SAMPLER`` among them).
Off, no provider and no exporter exist, :data:`enabled` is False, and every
helper here returns at its first line: the send path pays one attribute read.

A message's trace travels as its W3C ``traceparent``: taken from the sender's
request (or a new trace started by ``mesh.send``), stored on the inbox row
with the write, put in the event JSON by app.domain.event_wire (so the bus, SSE,
long-poll and webhooks carry it without knowing), and in the bus record's
headers. Each process starts its own spans under it: ``mesh.send`` (web),
``mesh.relay`` (outbox), ``mesh.push`` (push), ``mesh.deliver`` (the write to
an SSE / long-poll client). A batch that serves many messages is one span with
links to their traces, not a child of any one of them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("mesh.tracing")

# The header, event field and bus header that carry a message's trace.
TRACEPARENT = "traceparent"
SERVICE_PREFIX = "agent-mesh-"

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACER = trace.get_tracer("agent-mesh")

enabled = False
exporters_created = 0  # tests count it: none while tracing is off
# Whether a span's parent decides it (the SDK's parent-based samplers, its default):
# then a message whose stored traceparent says "not sampled" gets no span at all
# here, rather than the SDK's non-recording one, which costs a worker about as much
# per message as the work it wraps (ADR 052).
_parent_decides = True


def setup(process: str) -> bool:
    """Install the tracer provider of ``process`` (web, outbox, push, cron) when an
    OTLP endpoint is configured; True when tracing is on. Idempotent."""
    global enabled, exporters_created
    if enabled or not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return enabled
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    global _parent_decides
    sampler = os.environ.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
    _parent_decides = sampler.startswith("parentbased_")
    name = os.environ.get("OTEL_SERVICE_NAME") or f"{SERVICE_PREFIX}{process}"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    exporters_created += 1
    trace.set_tracer_provider(provider)
    enabled = True
    log.info("tracing on: service %s, OTLP endpoint %s", name,
             os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"])
    return True


def shutdown() -> None:
    """Flush what is buffered (a process's last spans) before exit."""
    if not enabled:
        return
    provider = trace.get_tracer_provider()
    with contextlib.suppress(Exception):
        provider.shutdown()  # type: ignore[attr-defined]


def parent_from(traceparent: str | None) -> otel_context.Context | None:
    """The context a ``traceparent`` names, or None (absent or malformed)."""
    if not enabled or not traceparent:
        return None
    ctx = _PROPAGATOR.extract({TRACEPARENT: traceparent})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def sampled(traceparent: str) -> bool:
    """Whether a ``traceparent``'s flags (its last two hex digits) mark it sampled."""
    try:
        return bool(int(traceparent[-2:], 16) & 1)
    except ValueError:
        return False


def _spanned(traceparent: str | None) -> bool:
    """Whether a message with this stored ``traceparent`` gets spans: it has one,
    and its sampling decision is sampled (or the sampler does not follow parents)."""
    if not traceparent:
        return False
    return not _parent_decides or sampled(traceparent)


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current span, to store with a write; None off."""
    if not enabled:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get(TRACEPARENT)


@contextlib.contextmanager
def span(name: str, *, traceparent: str | None = None, kind: SpanKind = SpanKind.INTERNAL,
         attributes: Mapping[str, Any] | None = None,
         links: Iterable[str | None] = ()) -> Iterator[Span | None]:
    """A span named ``name``: a child of ``traceparent`` when given, else of the
    current span (a new trace when there is none); linked to each traceparent in
    ``links``. Yields None, and costs nothing more, while tracing is off."""
    if not enabled:
        yield None
        return
    if traceparent is None and _parent_decides:
        # A child of an unsampled span would be dropped by the sampler anyway.
        current = trace.get_current_span().get_span_context()
        if current.is_valid and not current.trace_flags.sampled:
            yield None
            return
    parent = parent_from(traceparent)
    linked = [Link(ctx) for ctx in (_span_context(tp) for tp in links) if ctx is not None]
    with _TRACER.start_as_current_span(name, context=parent, kind=kind,
                                       attributes=dict(attributes or {}),
                                       links=linked) as current:
        yield current


def _span_context(traceparent: str | None) -> trace.SpanContext | None:
    ctx = parent_from(traceparent)
    if ctx is None:
        return None
    return trace.get_current_span(ctx).get_span_context()


@contextlib.contextmanager
def request_context(headers: Mapping[str, str]) -> Iterator[None]:
    """Make the caller's ``traceparent`` header the current context for a request."""
    parent = parent_from(headers.get(TRACEPARENT)) if enabled else None
    if parent is None:
        yield
        return
    token = otel_context.attach(parent)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextlib.contextmanager
def batch(name: str, traceparents: Iterable[str | None], *,
          attributes: Mapping[str, Any] | None = None) -> Iterator[None]:
    """The spans of one batch that serves many messages: ``{name}.batch``, linked
    to every message's trace, and in each traced message's own trace a ``name``
    child covering the same time, linked back to the batch — so a message's
    trace shows every hop while no batch pretends to belong to one message."""
    if not enabled:
        yield
        return
    traced = [tp for tp in traceparents if _spanned(tp)]
    attrs = {"mesh.batch_size": len(traced), **(attributes or {})}
    if not traced:  # nothing traced in it: no span, and no trace of its own
        yield
        return
    if len(traced) == 1:
        # A batch of one message (most of them at a trickle) is that message's
        # span alone: no batch span and no links to build and export.
        with span(name, traceparent=traced[0], attributes=attrs):
            yield
        return
    start = time.time_ns()
    with span(f"{name}.batch", links=traced, attributes=attrs) as whole:
        yield
    end = time.time_ns()
    back = [Link(whole.get_span_context())] if whole is not None else []
    for tp in traced:
        parent = parent_from(tp)
        if parent is None:
            continue
        _TRACER.start_span(name, context=parent, start_time=start, links=back,
                           attributes=attrs).end(end_time=end)


def delivered(traceparents: Iterable[str | None], how: str) -> None:
    """``mesh.deliver`` in each message's trace: its event was handed to a client
    connection (``how``: sse, long-poll, webhook)."""
    if not enabled:
        return
    for tp in traceparents:
        parent = parent_from(tp) if _spanned(tp) else None
        if parent is not None:
            _TRACER.start_span("mesh.deliver", context=parent, kind=SpanKind.PRODUCER,
                               attributes={"mesh.delivery": how}).end()


class TraceIds(logging.Filter):
    """Gives each log record ``trace``: `` trace_id=…`` for a warning or worse
    written inside a traced span (so an error log leads to its trace), else ""."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.trace = ""
        if enabled and record.levelno >= logging.WARNING:
            ctx = trace.get_current_span().get_span_context()
            if ctx.is_valid:
                record.trace = f" trace_id={ctx.trace_id:032x}"
        return True

"""OpenTelemetry on the agent side: ``mesh.handle`` in each message's trace.

Like the gateway, off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (and the
``opentelemetry`` packages are installed: ``pip install './meshd[tracing]'``);
the service is named ``meshd``. An inbox event carries its message's
``traceparent``; the daemon and ``mesh agent`` handle it inside a ``mesh.handle``
span under it, give ``--exec`` handlers ``TRACEPARENT``, and every request the
SDK makes meanwhile sends the span's ``traceparent`` header, so the reply's
``mesh.send`` at the gateway joins the same trace.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

log = logging.getLogger("meshd.tracing")

# The event field and request header that carry a message's trace.
TRACEPARENT = "traceparent"
SERVICE = "meshd"

enabled = False
_tracer: Any = None
_propagator: Any = None


def setup() -> bool:
    """Install meshd's tracer provider when an OTLP endpoint is configured."""
    global enabled, _tracer, _propagator
    if enabled or not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return enabled
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the opentelemetry packages are "
                    "missing: pip install './meshd[tracing]'; tracing stays off")
        return False
    name = os.environ.get("OTEL_SERVICE_NAME") or SERVICE
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _tracer = trace.get_tracer("meshd")
    _propagator = TraceContextTextMapPropagator()
    enabled = True
    return True


def shutdown() -> None:
    if not enabled:
        return
    from opentelemetry import trace

    with contextlib.suppress(Exception):
        trace.get_tracer_provider().shutdown()  # type: ignore[attr-defined]


@contextlib.contextmanager
def handle(traceparent: str | None, attributes: Mapping[str, Any]) -> Iterator[Any]:
    """The ``mesh.handle`` span of one event, under its message's trace."""
    if not enabled:
        yield None
        return
    parent = _propagator.extract({TRACEPARENT: traceparent}) if traceparent else None
    from opentelemetry.trace import SpanKind

    with _tracer.start_as_current_span("mesh.handle", context=parent, kind=SpanKind.CONSUMER,
                                       attributes=dict(attributes)) as span:
        yield span


def annotate(attributes: Mapping[str, Any]) -> None:
    """Add ``attributes`` to the current span (a run's turns and cost on ``mesh.handle``)."""
    if not enabled:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(dict(attributes))


def current_headers() -> dict[str, str]:
    """``{"traceparent": …}`` of the current span, for a request to the gateway."""
    if not enabled:
        return {}
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier

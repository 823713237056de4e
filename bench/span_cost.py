"""What one send's spans cost the web process in the OpenTelemetry SDK alone.

The web process makes three spans per send while tracing is on: ``mesh.send``, its
``mesh.transaction`` child and ``mesh.deliver`` (the SSE write), and stores one
traceparent. This times exactly that, through app.platform.tracing, in CPU seconds
(getrusage, so other load on the machine changes it little):

- create and end, with a span processor that keeps the spans (no export);
- the OTLP protobuf encoding of those spans, in batches of 512 as the batch processor
  sends them (the HTTP POST itself not counted).

    python bench/span_cost.py [SENDS]
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from app.platform import tracing


class _Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _one_send() -> None:
    with tracing.span("mesh.send", kind=tracing.SpanKind.SERVER,
                      attributes={"http.request.method": "POST",
                                  "url.path": "/v1/mesh/tasks"}) as span:
        with tracing.span("mesh.transaction"):
            traceparent = tracing.current_traceparent()
        if span is not None:
            span.set_attribute("http.response.status_code", 201)
    tracing.delivered((traceparent,), "sse")


def main(sends: int) -> None:
    keep = _Keep()
    provider = TracerProvider(resource=Resource.create({"service.name": "agent-mesh-web"}))
    provider.add_span_processor(SimpleSpanProcessor(keep))
    trace.set_tracer_provider(provider)
    tracing.enabled = True  # the provider above instead of setup()'s exporter
    for _ in range(500):
        _one_send()
    keep.spans.clear()
    started = _cpu()
    for _ in range(sends):
        _one_send()
    made = (_cpu() - started) / sends
    spans = list(keep.spans)
    started = _cpu()
    for i in range(0, len(spans), 512):
        encode_spans(spans[i:i + 512]).SerializeToString()
    encoded = (_cpu() - started) / sends
    per = len(spans) / sends
    print(f"{sends} sends, {per:g} spans each")
    print(f"create + end: {made * 1e6:.1f} us CPU per send ({made / per * 1e6:.1f} per span)")
    print(f"OTLP encode:  {encoded * 1e6:.1f} us CPU per send ({encoded / per * 1e6:.1f} per span)")
    print(f"together:     {(made + encoded) * 1e6:.1f} us CPU per send")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)

"""The tracing helpers: a traceparent round trip, malformed ones ignored, the
event bytes' traceparent read without parsing, trace ids on warnings — and
nothing at all while tracing is off."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from app.domain.event_wire import encode_event, traceparent_of
from app.platform import tracing

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def on(monkeypatch: pytest.MonkeyPatch) -> TracerProvider:
    """Tracing on for one test, with a provider of its own (not the global one)."""
    provider = TracerProvider()
    monkeypatch.setattr(tracing, "enabled", True)
    monkeypatch.setattr(tracing, "_TRACER", provider.get_tracer("test"))
    return provider


def _record() -> logging.LogRecord:
    return logging.LogRecord("x", logging.WARNING, __file__, 1, "boom", None, None)


def test_off_everything_is_none() -> None:
    assert not tracing.enabled
    assert tracing.current_traceparent() is None and tracing.parent_from(PARENT) is None
    with tracing.span("mesh.send", traceparent=PARENT) as span:
        assert span is None and tracing.current_traceparent() is None
    record = _record()
    assert tracing.TraceIds().filter(record) and record.trace == ""


def test_a_span_under_a_traceparent_continues_its_trace(on: TracerProvider) -> None:
    with tracing.span("mesh.send", traceparent=PARENT):
        mine = tracing.current_traceparent()
        record = _record()
        tracing.TraceIds().filter(record)
    assert mine is not None and mine.split("-")[1] == PARENT.split("-")[1]
    assert mine.split("-")[2] != PARENT.split("-")[2]  # a new span id, same trace
    assert record.trace == f" trace_id={PARENT.split('-')[1]}"


@pytest.mark.parametrize("bad", ["", "nonsense", "00-xyz-abc-01", "00-" + "0" * 32 + "-" +
                                 "0" * 16 + "-01"])
def test_malformed_traceparents_start_no_trace(on: TracerProvider, bad: str) -> None:
    assert tracing.parent_from(bad) is None


def test_the_event_bytes_carry_it_last_and_only_when_present() -> None:
    row = {"seq": 1, "event_id": "e-1", "type": "t", "task_id": None, "context_id": None,
           "from_agent_id": None, "payload": {"text": '"traceparent":"fake"'},
           "created_at": datetime(2026, 1, 1, tzinfo=UTC)}
    assert traceparent_of(encode_event({**row, "traceparent": None})) is None
    data = encode_event({**row, "traceparent": PARENT})
    assert data.endswith(f',"traceparent":"{PARENT}"}}'.encode())
    assert traceparent_of(data) == PARENT
    # A peer's payload key of that name is not the envelope's.
    spoof = encode_event({**row, "payload": {"a": 1, "traceparent": PARENT}, "traceparent": None})
    assert traceparent_of(spoof) is None


UNSAMPLED = PARENT[:-2] + "00"
OTHER = "00-1af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class _Counting:
    """A tracer that counts the spans asked of the SDK, recording or not."""

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer
        self.started = 0

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        self.started += 1
        return self.tracer.start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        self.started += 1
        return self.tracer.start_as_current_span(*args, **kwargs)


def _recording(monkeypatch: pytest.MonkeyPatch, sampler: object | None = None,
               parent_decides: bool = True) -> tuple[InMemorySpanExporter, _Counting]:
    """Tracing on with an in-memory exporter; ``sampler`` None is the SDK's default."""
    provider = TracerProvider(**({"sampler": sampler} if sampler is not None else {}))
    spans = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = _Counting(provider.get_tracer("test"))
    monkeypatch.setattr(tracing, "enabled", True)
    monkeypatch.setattr(tracing, "_TRACER", tracer)
    monkeypatch.setattr(tracing, "_parent_decides", parent_decides)
    return spans, tracer


def test_the_flags_say_whether_a_traceparent_is_sampled() -> None:
    assert tracing.sampled(PARENT) and not tracing.sampled(UNSAMPLED)
    assert tracing.sampled(PARENT[:-2] + "03") and not tracing.sampled("nonsense-zz")


def test_an_unsampled_message_gets_no_span_of_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    spans, tracer = _recording(monkeypatch)
    with tracing.batch("mesh.push", [UNSAMPLED, None]):
        pass
    tracing.delivered([UNSAMPLED], "sse")
    assert tracer.started == 0 and spans.get_finished_spans() == ()
    with tracing.batch("mesh.push", [PARENT, UNSAMPLED, OTHER]):
        pass
    tracing.delivered([UNSAMPLED, PARENT], "sse")
    names = sorted(s.name for s in spans.get_finished_spans())
    assert names == ["mesh.deliver", "mesh.push", "mesh.push", "mesh.push.batch"]
    batch = next(s for s in spans.get_finished_spans() if s.name == "mesh.push.batch")
    assert batch.attributes is not None and batch.attributes["mesh.batch_size"] == 2


def test_a_write_under_an_unsampled_send_keeps_its_trace_id(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spans, tracer = _recording(monkeypatch)
    with tracing.span("mesh.send", traceparent=UNSAMPLED):
        with tracing.span("mesh.transaction") as tx:
            stored = tracing.current_traceparent()
    assert tx is None and tracer.started == 1 and spans.get_finished_spans() == ()
    assert stored is not None and stored.split("-")[1] == UNSAMPLED.split("-")[1]
    assert not tracing.sampled(stored)  # downstream workers skip it too


def test_a_sampler_that_ignores_parents_still_gets_its_spans(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spans, _ = _recording(monkeypatch, sampler=ALWAYS_ON, parent_decides=False)
    with tracing.batch("mesh.relay", [UNSAMPLED]):
        pass
    tracing.delivered([UNSAMPLED], "long-poll")
    assert sorted(s.name for s in spans.get_finished_spans()) == ["mesh.deliver", "mesh.relay"]


@pytest.mark.parametrize(("sampler", "decides"), [(None, True),
                                                  ("parentbased_traceidratio", True),
                                                  ("always_on", False),
                                                  ("traceidratio", False)])
def test_setup_reads_whether_parents_decide(monkeypatch: pytest.MonkeyPatch,
                                            sampler: str | None, decides: bool) -> None:
    monkeypatch.setattr(tracing, "enabled", False)
    monkeypatch.setattr(tracing, "_parent_decides", not decides)
    monkeypatch.setattr(tracing.trace, "set_tracer_provider", lambda provider: None)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    if sampler is None:
        monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    else:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    monkeypatch.setattr(tracing, "exporters_created", tracing.exporters_created)
    assert tracing.setup("web")
    assert tracing._parent_decides is decides

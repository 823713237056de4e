"""The tracing helpers: a traceparent round trip, malformed ones ignored, the
event bytes' traceparent read without parsing, trace ids on warnings — and
nothing at all while tracing is off."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from opentelemetry.sdk.trace import TracerProvider

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

"""The tracing scenario's pure helpers: trace ids, Jaeger's answer, the ratio."""

from __future__ import annotations

import math

from bench.cpu import Interval, Usage
from bench.scenarios.tracing import (
    HOPS,
    cpu_ms_per_send,
    hops_of,
    on_over_off,
    otel_env,
    sampled,
    trace_id_of,
    trace_ids,
)

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_trace_id_of_takes_the_id_of_a_well_formed_traceparent_only() -> None:
    assert trace_id_of(TP) == "4bf92f3577b34da6a3ce929d0e0e4736"
    for bad in (None, "", "00-abc-00f067aa0ba902b7-01", "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
                "00-" + "z" * 32 + "-00f067aa0ba902b7-01", TP + "-extra"):
        assert trace_id_of(bad) is None, bad


def test_trace_ids_counts_each_trace_once_and_survives_an_empty_answer() -> None:
    body = {"data": [{"traceID": "a"}, {"traceID": "b"}, {"traceID": "a"}, {"spans": []}]}
    assert trace_ids(body) == {"a", "b"}
    assert trace_ids({"data": None}) == set() == trace_ids({})


def test_a_trace_is_complete_only_with_a_span_from_every_hop() -> None:
    spans = [{"service": s, "operationName": n} for s, n in HOPS]
    assert HOPS <= hops_of(spans)
    assert not HOPS <= hops_of(spans[1:])


def test_cpu_per_send_adds_the_named_components_and_the_ratio_uses_the_off_mean() -> None:
    cpu = Interval(1.0, {"web": Usage(0.2, 0.0), "push": Usage(0.1, 0.0),
                         "jaeger": Usage(5.0, 0.0)}, 1.0, 1.0)
    assert math.isclose(cpu_ms_per_send(cpu, 100, ["web", "push", "gone"]), 3.0)
    assert math.isnan(cpu_ms_per_send(cpu, 0, ["web"]))
    assert math.isclose(on_over_off(3.3, [2.9, 3.1]), 1.1)
    assert math.isnan(on_over_off(1.0, []))
    assert math.isnan(on_over_off(1.0, [0.0]))


def test_every_send_is_sampled_on_the_sdks_export_schedule() -> None:
    env = otel_env("http://127.0.0.1:4318")
    assert env == {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                   "OTEL_TRACES_SAMPLER": "parentbased_always_on"}


def test_the_sampled_run_asks_the_sdk_for_a_share_of_new_traces() -> None:
    env = otel_env("http://127.0.0.1:4318", 0.1)
    assert env["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
    assert env["OTEL_TRACES_SAMPLER_ARG"] == "0.1"


def test_a_stored_traceparent_is_sampled_by_its_flags() -> None:
    assert sampled(TP) and not sampled(TP[:-2] + "00")
    assert not sampled(None) and not sampled("00-abc-00f067aa0ba902b7-01")

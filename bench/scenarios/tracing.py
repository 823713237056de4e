"""Scenario 8: what tracing costs a send (ADR 042, ADR 052).

The latency scenario's open loop (``bench.scenarios.latency.run``, its CPU
meter) four times in one sitting: tracing off (the normal processes), on
(web, outbox and push restarted with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing
at a Jaeger this scenario starts, every trace sampled), on with one trace in
ten sampled (``parentbased_traceidratio``, 0.1: what a busy deployment runs),
and off again (the processes restarted without it), so drift of the shared
machine shows as the difference between the two off runs. Jaeger runs during all three, so the
neighbours are the same; its own CPU is metered in the traced run but is not
the pipeline's (a deployment's collector runs elsewhere).

Sends carry no ``traceparent``: each starts its own trace, the most a send can
cost. Afterwards Jaeger's query API says how many ``mesh.send`` traces arrived
for the traced window, and a sample of the traced run's inbox rows (their
stored ``traceparent``) is looked up to check each trace crossed every process.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from app.platform import tracing
from bench.client import Client
from bench.cpu import Interval
from bench.env import Env
from bench.load import Cast, inbox_seqs
from bench.scenarios import latency
from bench.topology import Topology
from devstack.jaeger import Jaeger
from devstack.process import free_port

TRACED_KINDS = ("web", "outbox", "push")
WEB_SERVICE = "agent-mesh-web"
# Every process a send crosses leaves one span in the message's own trace.
HOPS = frozenset({(WEB_SERVICE, "mesh.send"), ("agent-mesh-outbox", "mesh.relay"),
                  ("agent-mesh-push", "mesh.push"), (WEB_SERVICE, "mesh.deliver")})
SAMPLE = 20
JAEGER = "jaeger"
RATIO = 0.1  # the sampled run's share of traces


def otel_env(endpoint: str, ratio: float | None = None) -> dict[str, str]:
    """The environment a traced process gets: export to ``endpoint`` on the SDK's
    own schedule (what a deployment runs: a batch every 5 s or 512 spans); sample
    every trace that has no parent (all of the bench's sends), or with ``ratio``
    that share of them."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
           "OTEL_TRACES_SAMPLER": "parentbased_always_on"}
    if ratio is not None:
        env |= {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                "OTEL_TRACES_SAMPLER_ARG": str(ratio)}
    return env


def sampled(traceparent: str | None) -> bool:
    """Whether a stored ``traceparent`` is well formed and says its trace was sampled."""
    return traceparent is not None and trace_id_of(traceparent) is not None \
        and tracing.sampled(traceparent)


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a W3C ``traceparent`` (``00-<32 hex>-<16 hex>-<2 hex>``), or None."""
    parts = (traceparent or "").split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or parts[1] == "0" * 32:
        return None
    try:
        int(parts[1], 16)
    except ValueError:
        return None
    return parts[1]


def trace_ids(body: dict[str, Any]) -> set[str]:
    """The trace ids in a Jaeger ``/api/traces`` answer."""
    return {t["traceID"] for t in body.get("data") or [] if t.get("traceID")}


def hops_of(spans: Iterable[dict[str, Any]]) -> set[tuple[str, str]]:
    """(service, span name) pairs of a trace's spans (``Jaeger.trace``'s shape)."""
    return {(s.get("service") or "", s.get("operationName") or "") for s in spans}


def cpu_ms_per_send(cpu: Interval, n: int, names: Iterable[str]) -> float:
    """CPU milliseconds per send of the components ``names`` together."""
    if not n:
        return float("nan")
    return 1000 * sum(cpu.usage[k].cpu for k in names if k in cpu.usage) / n


@dataclass
class Traced:
    """What Jaeger holds for one traced run, checked against the stored rows."""

    traces: int = 0                 # mesh.send traces Jaeger holds for the run's window
    traced_rows: int = 0            # the run's inbox rows with a traceparent
    sampled_rows: int = 0           # of them: marked sampled
    rows: int = 0                   # the run's inbox rows
    sample: list[str] = field(default_factory=list)     # sampled trace ids looked up
    complete: int = 0               # of them: a span from every hop
    missing_hops: set[tuple[str, str]] = field(default_factory=set)


@dataclass
class TracingRuns:
    off: latency.LatencyRun
    on: latency.LatencyRun
    sampled: latency.LatencyRun
    off_again: latency.LatencyRun
    on_check: Traced
    sampled_check: Traced

    @property
    def runs(self) -> tuple[tuple[str, latency.LatencyRun], ...]:
        return (("off", self.off), ("on", self.on), (f"on, {RATIO:g} sampled", self.sampled),
                ("off again", self.off_again))


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.load(resp)  # type: ignore[no-any-return]


def _count_traces(jaeger: Jaeger, t0: float, t1: float, limit: int) -> int:
    query = urllib.parse.urlencode({"service": WEB_SERVICE, "operation": "mesh.send",
                                    "start": int(t0 * 1e6), "end": int(t1 * 1e6),
                                    "limit": limit})
    try:
        return len(trace_ids(_get_json(f"{jaeger.ui_url}/api/traces?{query}")))
    except OSError:
        return 0


async def _settled_count(jaeger: Jaeger, t0: float, t1: float, want: int,
                         timeout: float = 20.0) -> int:
    """Poll Jaeger until it holds ``want`` traces of the window or the count stops
    growing (the processes flushed their spans as they stopped; Jaeger stores a
    batch every 200 ms)."""
    deadline = time.monotonic() + timeout
    last = -1
    while True:
        got = await asyncio.to_thread(_count_traces, jaeger, t0, t1, 2 * want + 1000)
        if got >= want or got == last or time.monotonic() > deadline:
            return got
        last = got
        await asyncio.sleep(1.0)


async def _traceparents(database_url: str, after: dict[str, int]) -> list[str | None]:
    """The stored traceparents of the recipients' inbox rows written after ``after``."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT e.traceparent FROM inbox_events e "
            "JOIN unnest($1::text[], $2::bigint[]) AS a(agent_id, seq) "
            "ON e.agent_id = a.agent_id AND e.seq > a.seq ORDER BY e.created_at",
            list(after), list(after.values()))
    finally:
        await conn.close()
    return [r["traceparent"] for r in rows]


async def _check_sample(jaeger: Jaeger, ids: list[str], out: Traced,
                        timeout: float = 20.0) -> None:
    """Look each sampled trace up until it has every hop (or the deadline passes)."""
    deadline = time.monotonic() + timeout
    for trace_id in ids:
        while True:
            have = hops_of(await asyncio.to_thread(jaeger.trace, trace_id))
            if HOPS <= have:
                out.complete += 1
                break
            if time.monotonic() > deadline:
                out.missing_hops |= HOPS - have
                break
            await asyncio.sleep(0.5)


async def _restart(env: Env, topo: Topology, os_env: dict[str, str] | None) -> None:
    for kind in TRACED_KINDS:
        await topo.restart(env, kind, topo.settings[kind], os_env)


@dataclass
class _Window:
    run: latency.LatencyRun
    after: dict[str, int]   # the recipients' inbox seqs when the measured run began
    t0: float               # wall clock (epoch s) around the measured run: Jaeger's window
    t1: float


async def _one(env: Env, topo: Topology, cast: Cast, *, rate: float, seconds: float,
               extra: dict[str, int]) -> _Window:
    """A warm-up, then one measured open-loop run on the current processes."""
    db = env.settings.database_url
    client = Client(topo.urls)
    try:
        await client.prewarm(16)
        # Warm-up (connections, prepared statements, the exporter's first batch): not measured.
        await latency.run(topo.urls, db, cast, client, rate=rate, seconds=2.0, settle=5.0)
        after = await inbox_seqs(db, [r.agent_id for r in cast.recipients])
        t0 = time.time()
        measured = await latency.run(topo.urls, db, cast, client, rate=rate, seconds=seconds,
                                     settle=15.0, meter=env.meter(topo.named(), extra))
        return _Window(measured, after, t0, time.time())
    finally:
        client.close()


async def _check(env: Env, jaeger: Jaeger, window: _Window) -> Traced:
    """Jaeger's traces of a traced run: one per sampled send, each crossing every hop."""
    stored = await _traceparents(env.settings.database_url, window.after)
    ids = [trace_id_of(tp) for tp in stored if sampled(tp)]
    out = Traced(rows=len(stored), traced_rows=sum(trace_id_of(tp) is not None for tp in stored),
                 sampled_rows=len(ids))
    out.traces = await _settled_count(jaeger, window.t0, window.t1, len(ids))
    step = max(1, len(ids) // SAMPLE)
    out.sample = [i for i in ids[::step][:SAMPLE] if i is not None]
    await _check_sample(jaeger, out.sample, out)
    return out


async def run(env: Env, topo: Topology, cast: Cast, *, rate: float,
              seconds: float) -> TracingRuns:
    jaeger = Jaeger(env.root / "jaeger" / "data", free_port())
    await asyncio.to_thread(jaeger.start, 60.0)
    traced = False
    try:
        assert jaeger.proc is not None
        meter_jaeger = {JAEGER: jaeger.proc.pid}
        off = await _one(env, topo, cast, rate=rate, seconds=seconds, extra=meter_jaeger)
        await _restart(env, topo, otel_env(jaeger.otlp_endpoint))
        traced = True
        on = await _one(env, topo, cast, rate=rate, seconds=seconds, extra=meter_jaeger)
        # Each restart stops the traced processes, which flush what they buffered:
        # a run's traces are all in Jaeger once the next configuration is up.
        await _restart(env, topo, otel_env(jaeger.otlp_endpoint, RATIO))
        on_check = await _check(env, jaeger, on)
        some = await _one(env, topo, cast, rate=rate, seconds=seconds, extra=meter_jaeger)
        await _restart(env, topo, None)
        traced = False
        some_check = await _check(env, jaeger, some)
        again = await _one(env, topo, cast, rate=rate, seconds=seconds, extra=meter_jaeger)
        return TracingRuns(off.run, on.run, some.run, again.run, on_check, some_check)
    finally:
        if traced:
            await _restart(env, topo, None)
        await asyncio.to_thread(jaeger.stop)


def on_over_off(on: float, offs: Iterable[float]) -> float:
    """``on`` ÷ the mean of the tracing-off figures (NaN without any)."""
    values = [v for v in offs if v == v]
    if not values or not sum(values):
        return float("nan")
    return on / (sum(values) / len(values))

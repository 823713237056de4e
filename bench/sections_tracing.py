"""Report section for the tracing scenario: CPU per send and e2e with tracing off,
on (every trace sampled, exported to a Jaeger) and off again (ADR 042)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.env import Env
from bench.plan import Plan
from bench.report import Section, verdict
from bench.scenarios import latency, tracing
from bench.scenarios.tracing import TRACED_KINDS, cpu_ms_per_send, on_over_off
from bench.sections import ms
from bench.stats import Dist, fmt, fmt_ratio
from bench.topology import Topology

TARGET = 1.10   # at most 10 % more CPU per send with tracing on


def _services(r: latency.LatencyRun) -> list[str]:
    """Every metered component but the load client and Jaeger: the pipeline."""
    assert r.cpu is not None
    return [k for k in r.cpu.usage if k not in (tracing.JAEGER, "load client")]


async def s_tracing(env: Env, ctx: dict, plan: Plan) -> Section:  # type: ignore[type-arg]
    sec = Section("8. What tracing costs a send")
    topo: Topology = ctx["topology"]
    t = await tracing.run(env, topo, ctx["latency_cast"], rate=plan.rate,
                          seconds=plan.latency_seconds)
    runs = t.runs
    if any(r.cpu is None or not r.accepted for _, r in runs):
        sec.row("CPU per send", "n/a", "", "", "", verdict(None))
        sec.note("A run had no CPU interval or no accepted sends: "
                 + ", ".join(f"{label}: {r.accepted} accepted, {len(r.errors)} errors"
                             for label, r in runs))
        return sec
    offs = (t.off, t.off_again)

    def per(r: latency.LatencyRun, names: list[str] | tuple[str, ...]) -> float:
        assert r.cpu is not None
        return cpu_ms_per_send(r.cpu, r.accepted, names)

    mesh = list(TRACED_KINDS)
    mesh_on, mesh_offs = per(t.on, mesh), [per(r, mesh) for r in offs]
    mesh_ratio = on_over_off(mesh_on, mesh_offs)
    sec.row(f"CPU per send at {plan.rate:g} msg/s, web + outbox + push (on vs off)",
            fmt(mesh_on, "ms"), " / ".join(fmt(v, "ms") for v in mesh_offs) + " (off, off again)",
            fmt_ratio(mesh_ratio) + " the off runs' mean", f"≤ {TARGET:.2f}×",
            verdict(mesh_ratio <= TARGET))
    pipe_on = per(t.on, _services(t.on))
    pipe_offs = [per(r, _services(r)) for r in offs]
    pipe_ratio = on_over_off(pipe_on, pipe_offs)
    sec.row("CPU per send, whole pipeline (mesh + services; Jaeger not counted)",
            fmt(pipe_on, "ms"), " / ".join(fmt(v, "ms") for v in pipe_offs),
            fmt_ratio(pipe_ratio) + " the off runs' mean", f"≤ {TARGET:.2f}×",
            verdict(pipe_ratio <= TARGET))
    sec.row("Jaeger's own CPU per send (the collector; elsewhere in a deployment)",
            fmt(per(t.on, [tracing.JAEGER]), "ms"),
            " / ".join(fmt(per(r, [tracing.JAEGER]), "ms") for r in offs) + " (idle)",
            "", "", verdict(None))
    c, b = t.on.e2e_dist, t.off.e2e_dist
    sec.row(f"e2e p50 / p99 at {plan.rate:g} msg/s (on vs off)",
            f"{ms(c, 'p50')} / {ms(c, 'p99')}", f"{ms(b, 'p50')} / {ms(b, 'p99')}",
            fmt_ratio(b.p50 / c.p50) + " (p50)", "", verdict(None))
    sec.row("traces Jaeger received for the traced run (`mesh.send`, one per send)",
            f"{t.traces:,} of {t.on.accepted:,} sends",
            f"sample: {t.complete} of {len(t.sample)} traces with every hop", "", "all",
            verdict(t.traces >= t.on.accepted and t.complete == len(t.sample) > 0))

    sec.note(f"The latency scenario's open loop ({len(ctx['latency_cast'].senders)} senders → "
             f"{len(ctx['latency_cast'].recipients)} recipients on SSE, {plan.rate:g} msg/s for "
             f"{plan.latency_seconds:g} s, a 2 s warm-up before each run) three times in one "
             "sitting: tracing **off** (the normal processes), **on** (web, outbox and push "
             "restarted with `OTEL_EXPORTER_OTLP_ENDPOINT` at a Jaeger started for this "
             "scenario, `OTEL_BSP_SCHEDULE_DELAY=200`, `OTEL_TRACES_SAMPLER="
             "parentbased_always_on`), then **off again** (restarted without it). Sends carry "
             "no `traceparent`, so every send starts and exports its own trace. Jaeger runs "
             "through all three runs (same neighbours); its CPU is shown but not counted in "
             "the pipeline. The ratio is on ÷ the mean of the two off runs; their difference "
             "is the machine's drift meanwhile.")
    sec.note("")
    sec.note("| run | offered | accepted | delivered | missing | dup | e2e p50 | e2e p99 "
             "| API p50 | API p99 | send lag p99 | other processes (% of a core) |")
    sec.note("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, r in runs:
        assert r.cpu is not None
        d, a = r.e2e_dist, r.api_dist
        sec.note(f"| {label} | {r.offered} | {r.accepted} | {len(r.e2e)} | {r.missing} "
                 f"| {r.duplicates} | {ms(d, 'p50')} | {ms(d, 'p99')} | {ms(a, 'p50')} "
                 f"| {ms(a, 'p99')} | {fmt(Dist.of_seconds(r.send_lag).p99, 'ms')} "
                 f"| {fmt(100 * r.cpu.others / r.cpu.wall, '%')} |")
    sec.note("")
    sec.note("CPU ms per send by component:")
    sec.note("")
    sec.note("| component | off | on | off again | on ÷ off (mean) |")
    sec.note("|---|---|---|---|---|")
    assert t.on.cpu is not None
    for name in t.on.cpu.usage:
        on = per(t.on, [name])
        o = [per(r, [name]) for r in offs]
        sec.note(f"| {name} | {fmt(o[0])} | {fmt(on)} | {fmt(o[1])} "
                 f"| {fmt_ratio(on_over_off(on, o))} |")
    for label, names in (("web + outbox + push", mesh), ("pipeline (no Jaeger, no client)", None)):
        vals = [per(r, names if names is not None else _services(r)) for _, r in runs]
        sec.note(f"| **{label}** | **{fmt(vals[0])}** | **{fmt(vals[1])}** | **{fmt(vals[2])}** "
                 f"| **{fmt_ratio(on_over_off(vals[1], (vals[0], vals[2])))}** |")
    sec.note("")
    sec.note(f"Traced run: {t.traced_rows:,} of {t.rows:,} recipient inbox rows carry a "
             f"`traceparent`; Jaeger holds {t.traces:,} `mesh.send` traces started in the run's "
             f"window; {len(t.sample)} of the stored traceparents looked up, {t.complete} with a "
             f"span from every hop ({', '.join(sorted(f'{s} {n}' for s, n in tracing.HOPS))})."
             + (f" Missing hops: {sorted(t.missing_hops)}." if t.missing_hops else ""))
    for label, r in runs:
        if r.errors:
            sec.note(f"\n{label}: {len(r.errors)} errors, first: `{r.errors[0]}`")
    return sec


RUNNERS: dict[str, Callable[[Env, dict, Plan], Awaitable[Section]]] = {  # type: ignore[type-arg]
    "tracing": s_tracing,
}

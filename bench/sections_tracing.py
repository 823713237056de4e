"""Report section for the tracing scenario: CPU per send and e2e with tracing off,
on (every trace sampled, exported to a Jaeger), on with one trace in ten sampled,
and off again (ADR 042, ADR 052)."""

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
    traced = (("every trace sampled", t.on, t.on_check),
              (f"{tracing.RATIO:g} of traces sampled", t.sampled, t.sampled_check))
    for label, run, _ in traced:
        mesh_on, mesh_offs = per(run, mesh), [per(r, mesh) for r in offs]
        mesh_ratio = on_over_off(mesh_on, mesh_offs)
        sec.row(f"CPU per send at {plan.rate:g} msg/s, web + outbox + push, {label} "
                "(on vs off)",
                fmt(mesh_on, "ms"),
                " / ".join(fmt(v, "ms") for v in mesh_offs) + " (off, off again)",
                fmt_ratio(mesh_ratio) + " the off runs' mean", f"≤ {TARGET:.2f}×",
                verdict(mesh_ratio <= TARGET))
        pipe_on = per(run, _services(run))
        pipe_offs = [per(r, _services(r)) for r in offs]
        pipe_ratio = on_over_off(pipe_on, pipe_offs)
        sec.row(f"CPU per send, whole pipeline, {label} (mesh + services; Jaeger not counted)",
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
    for label, run, check in traced:
        sec.row(f"traces Jaeger received, {label} (`mesh.send`, one per sampled send)",
                f"{check.traces:,} of {check.sampled_rows:,} sampled sends "
                f"({run.accepted:,} sent)",
                f"sample: {check.complete} of {len(check.sample)} traces with every hop", "",
                "all", verdict(check.traces >= check.sampled_rows > 0
                               and check.complete == len(check.sample) > 0))

    sec.note(f"The latency scenario's open loop ({len(ctx['latency_cast'].senders)} senders → "
             f"{len(ctx['latency_cast'].recipients)} recipients on SSE, {plan.rate:g} msg/s for "
             f"{plan.latency_seconds:g} s, a 2 s warm-up before each run) three times in one "
             "sitting: tracing **off** (the normal processes), **on** (web, outbox and push "
             "restarted with `OTEL_EXPORTER_OTLP_ENDPOINT` at a Jaeger started for this "
             "scenario, the SDK's export schedule, `OTEL_TRACES_SAMPLER="
             "parentbased_always_on`), **on** with `OTEL_TRACES_SAMPLER=parentbased_traceidratio`"
             f" and `OTEL_TRACES_SAMPLER_ARG={tracing.RATIO:g}`, then **off again** (restarted "
             "without it). Sends carry no `traceparent`, so each send starts its own trace; "
             "always-on exports every one. Jaeger runs "
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
    sec.note("| component | off | on | on, sampled | off again | on ÷ off (mean) "
             "| sampled ÷ off (mean) |")
    sec.note("|---|---|---|---|---|---|---|")
    assert t.on.cpu is not None

    def line(label: str, names: list[str] | None) -> None:
        o0, on, some, o1 = (per(r, names if names is not None else _services(r))
                            for _, r in runs)
        sec.note(f"| {label} | {fmt(o0)} | {fmt(on)} | {fmt(some)} | {fmt(o1)} "
                 f"| {fmt_ratio(on_over_off(on, (o0, o1)))} "
                 f"| {fmt_ratio(on_over_off(some, (o0, o1)))} |")

    for name in t.on.cpu.usage:
        line(name, [name])
    line("**web + outbox + push**", mesh)
    line("**pipeline (no Jaeger, no client)**", None)
    sec.note("")
    hops = ", ".join(sorted(f"{s} {n}" for s, n in tracing.HOPS))
    for label, _, check in traced:
        sec.note(f"Traced run, {label}: {check.traced_rows:,} of {check.rows:,} recipient inbox "
                 f"rows carry a `traceparent`, {check.sampled_rows:,} of them sampled; Jaeger "
                 f"holds {check.traces:,} `mesh.send` traces started in the run's window; "
                 f"{len(check.sample)} of the sampled traceparents looked up, {check.complete} "
                 f"with a span from every hop ({hops})."
                 + (f" Missing hops: {sorted(check.missing_hops)}."
                    if check.missing_hops else ""))
    for label, r in runs:
        if r.errors:
            sec.note(f"\n{label}: {len(r.errors)} errors, first: `{r.errors[0]}`")
    return sec


RUNNERS: dict[str, Callable[[Env, dict, Plan], Awaitable[Section]]] = {  # type: ignore[type-arg]
    "tracing": s_tracing,
}

"""Report section for the a2a_blocking scenario: the send load's API latency alone and
while blocking A2A SendMessage calls are parked (ADR 036)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

from bench.env import Env
from bench.plan import Plan
from bench.report import Section, verdict
from bench.scenarios import a2a_blocking
from bench.sections import cpu_note, ms
from bench.stats import Dist, fmt, fmt_ratio

TARGET_P99_MS = 50.0


async def s_a2a_blocking(env: Env, ctx: dict, plan: Plan) -> Section:  # type: ignore[type-arg]
    sec = Section("9. Parked blocking A2A calls vs the send load")
    r = await a2a_blocking.run(env, ctx["topology"], ctx["latency_cast"], rate=plan.rate,
                               seconds=plan.latency_seconds, callers=plan.a2a_callers,
                               per_caller=plan.a2a_per_caller, window=plan.a2a_window_seconds)
    b, w, g = r.baseline.api_dist, r.loaded.api_dist, r.again.api_dist
    sec.row(f"API p99 at {plan.rate:g} msg/s with the blocking calls parked",
            ms(w, "p99"), f"{ms(b, 'p99')} / {ms(g, 'p99')} (none parked, before / after)",
            fmt_ratio((b.p99 + g.p99) / 2 / w.p99) + " (none parked: mean)", f"≤ {TARGET_P99_MS:g} ms",
            verdict(w.p99 <= TARGET_P99_MS))
    sec.row("API p50 (parked vs none)", ms(w, "p50"), f"{ms(b, 'p50')} / {ms(g, 'p50')}",
            fmt_ratio((b.p50 + g.p50) / 2 / w.p50) + " (mean)", "", verdict(None))
    sec.row("blocking calls still parked when the loaded run ended",
            f"{r.open_at_end} of {r.calls}", f"{r.open_at_start} at its start", "",
            f"{r.calls}", verdict(r.open_at_end == r.calls))
    sec.note(f"The web process restarted with `MESH_A2A_BLOCKING_SECONDS={r.window:g}`; the "
             f"latency scenario's open loop ({len(ctx['latency_cast'].senders)} senders → "
             f"{len(ctx['latency_cast'].recipients)} recipients on SSE, {plan.rate:g} msg/s for "
             f"{plan.latency_seconds:g} s, after a 2 s warm-up) first alone, then while "
             f"{plan.a2a_callers} agents × {plan.a2a_per_caller} blocking `SendMessage` calls "
             "(raw JSON-RPC, `A2A-Version: 1.0`, no `returnImmediately`, each on its own "
             "connection) wait on tasks of 4 agents that nobody reads, so every call that got "
             "a slot waits out the whole window, then alone again on a fresh web process (a "
             "closed connection does not end a server-side wait; the restart does), so the "
             "two runs with none parked show the machine's drift. The loaded run starts once "
             "the calls' "
             f"messages are written ({r.written} of {r.calls}). A call still without an answer "
             "is parked; one refused a slot would answer at once with `submitted`. The web "
             "process is restarted on the bench's settings afterwards.")
    sec.note("")
    sec.note("| run | offered | accepted | errors | API p50 | API p90 | API p99 | API max "
             "| e2e p50 | e2e p99 | send lag p99 | blocking calls parked |")
    sec.note("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, run, parked in (("none parked", r.baseline, "0"),
                               ("blocking calls parked", r.loaded,
                                f"{r.open_at_start} → {r.open_at_end}"),
                               ("none parked again", r.again, "0")):
        a, e = run.api_dist, run.e2e_dist
        sec.note(f"| {label} | {run.offered} | {run.accepted} | {len(run.errors)} "
                 f"| {ms(a, 'p50')} | {ms(a, 'p90')} | {ms(a, 'p99')} | {ms(a, 'max')} "
                 f"| {ms(e, 'p50')} | {ms(e, 'p99')} "
                 f"| {fmt(Dist.of_seconds(run.send_lag).p99, 'ms')} | {parked} |")
    early = Counter(status for status, _ in r.parked.answers)
    if early or r.parked.errors:
        sec.note(f"\nAnswered before the end: {dict(early)} (HTTP status → calls), "
                 f"{len(r.parked.errors)} connection errors"
                 + (f"; first body `{r.parked.bodies[0]!r}`" if r.parked.bodies else "")
                 + (f"; first error `{r.parked.errors[0]}`" if r.parked.errors else ""))
    for label, run in (("none parked", r.baseline), ("parked", r.loaded),
                       ("none parked again", r.again)):
        if run.errors:
            sec.note(f"\n{label}: {len(run.errors)} errors, first: `{run.errors[0]}`")
    sec.note("\nCPU with none parked:")
    cpu_note(sec, r.baseline.cpu, r.baseline.accepted, "send")
    sec.note("\nCPU with the blocking calls parked:")
    cpu_note(sec, r.loaded.cpu, r.loaded.accepted, "send")
    sec.note("\nCPU with none parked again:")
    cpu_note(sec, r.again.cpu, r.again.accepted, "send")
    return sec


RUNNERS: dict[str, Callable[[Env, dict, Plan], Awaitable[Section]]] = {  # type: ignore[type-arg]
    "a2a_blocking": s_a2a_blocking,
}

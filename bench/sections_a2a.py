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
    sec = Section("10. Parked blocking A2A calls vs the send load")
    r = await a2a_blocking.run(env, ctx["topology"], ctx["latency_cast"], rate=plan.rate,
                               seconds=plan.latency_seconds, callers=plan.a2a_callers,
                               per_caller=plan.a2a_per_caller, window=plan.a2a_window_seconds)
    lo, q = r.loaded, r.quiet
    b, w, g = r.baseline.api_dist, lo.run.api_dist, r.again.api_dist
    sec.row(f"API p99 at {plan.rate:g} msg/s with the blocking calls parked",
            ms(w, "p99"), f"{ms(b, 'p99')} / {ms(g, 'p99')} (none parked, before / after)",
            fmt_ratio((b.p99 + g.p99) / 2 / w.p99) + " (none parked: mean)", f"≤ {TARGET_P99_MS:g} ms",
            verdict(w.p99 <= TARGET_P99_MS))
    sec.row("API p50 (parked vs none)", ms(w, "p50"), f"{ms(b, 'p50')} / {ms(g, 'p50')}",
            fmt_ratio((b.p50 + g.p50) / 2 / w.p50) + " (mean)", "", verdict(None))
    sec.row("blocking calls still parked when the loaded run ended",
            f"{lo.open_at_end} of {lo.calls}", f"{lo.open_at_start} at its start", "",
            f"{lo.calls}", verdict(lo.open_at_end == lo.calls))
    qd = q.run.api_dist
    sec.row(f"API p99 parked, the waits' quiet re-read every {r.quiet_recheck:g} s instead "
            f"of {env.settings.longpoll_recheck_seconds:g} s (diagnosis)",
            f"{ms(qd, 'p99')} ({q.open_at_end} of {q.calls} parked)", ms(w, "p99"),
            fmt_ratio(w.p99 / qd.p99), "", verdict(None))
    sec.note(f"The web process restarted with `MESH_A2A_BLOCKING_SECONDS={r.window:g}`; the "
             f"latency scenario's open loop ({len(ctx['latency_cast'].senders)} senders → "
             f"{len(ctx['latency_cast'].recipients)} recipients on SSE, {plan.rate:g} msg/s for "
             f"{plan.latency_seconds:g} s, after a 2 s warm-up) first alone, then while "
             f"{plan.a2a_callers} agents × {plan.a2a_per_caller} blocking `SendMessage` calls "
             "(raw JSON-RPC, `A2A-Version: 1.0`, no `returnImmediately`, each on its own "
             "connection) wait on tasks of 4 agents that nobody reads, so every call that got "
             "a slot waits out the whole window, then alone again on a fresh web process (a "
             "closed connection does not end a server-side wait; the restart does), so the "
             "two runs with none parked show the machine's drift; then parked once more on a "
             "web process whose waits re-read their task only every "
             f"{r.quiet_recheck:g} s when quiet (`MESH_LONGPOLL_RECHECK_SECONDS`; "
             f"{env.settings.longpoll_recheck_seconds:g} s otherwise). A parked run starts once "
             f"the calls' messages are written ({lo.written} and {q.written} of {lo.calls}). "
             "A call still without an answer "
             "is parked; one refused a slot would answer at once with `submitted`. The web "
             "process is restarted on the bench's settings afterwards.")
    sec.note("")
    sec.note("| run | offered | accepted | errors | API p50 | API p90 | API p99 | API max "
             "| e2e p50 | e2e p99 | send lag p99 | blocking calls parked |")
    sec.note("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, run, parked in (("none parked", r.baseline, "0"),
                               ("blocking calls parked", lo.run,
                                f"{lo.open_at_start} → {lo.open_at_end}"),
                               ("none parked again", r.again, "0"),
                               (f"parked, quiet re-read every {r.quiet_recheck:g} s", q.run,
                                f"{q.open_at_start} → {q.open_at_end}")):
        a, e = run.api_dist, run.e2e_dist
        sec.note(f"| {label} | {run.offered} | {run.accepted} | {len(run.errors)} "
                 f"| {ms(a, 'p50')} | {ms(a, 'p90')} | {ms(a, 'p99')} | {ms(a, 'max')} "
                 f"| {ms(e, 'p50')} | {ms(e, 'p99')} "
                 f"| {fmt(Dist.of_seconds(run.send_lag).p99, 'ms')} | {parked} |")
    for pr in (lo, q):
        p = pr.parked
        early = Counter(status for status, _ in p.answers)
        if early or p.errors:
            sec.note(f"\nAnswered before the end: {dict(early)} (HTTP status → calls), "
                     f"{len(p.errors)} connection errors"
                     + (f"; first body `{p.bodies[0]!r}`" if p.bodies else "")
                     + (f"; first error `{p.errors[0]}`" if p.errors else ""))
    for label, run in (("none parked", r.baseline), ("parked", lo.run),
                       ("none parked again", r.again), ("parked, quiet", q.run)):
        if run.errors:
            sec.note(f"\n{label}: {len(run.errors)} errors, first: `{run.errors[0]}`")
    sec.note("\nCPU with none parked:")
    cpu_note(sec, r.baseline.cpu, r.baseline.accepted, "send")
    sec.note("\nCPU with the blocking calls parked:")
    cpu_note(sec, lo.run.cpu, lo.run.accepted, "send")
    sec.note("\nCPU with none parked again:")
    cpu_note(sec, r.again.cpu, r.again.accepted, "send")
    sec.note(f"\nCPU parked, quiet re-read every {r.quiet_recheck:g} s:")
    cpu_note(sec, q.run.cpu, q.run.accepted, "send")
    return sec


RUNNERS: dict[str, Callable[[Env, dict, Plan], Awaitable[Section]]] = {  # type: ignore[type-arg]
    "a2a_blocking": s_a2a_blocking,
}

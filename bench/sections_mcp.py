"""Report section for the MCP scenario: tool-call latency and CPU per call over
``/mcp`` against the equivalent REST calls in the same sitting (ADR 040)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.client import Client
from bench.cpu import LOAD_CLIENT
from bench.env import Env
from bench.plan import Plan
from bench.report import Section, verdict
from bench.scenarios import mcp
from bench.scenarios.tracing import on_over_off
from bench.sections import ms
from bench.stats import Dist, fmt, fmt_ratio
from bench.topology import Topology

TARGET_P99 = 50.0   # ms, a tool call over /mcp at the plan's MCP rate


def _pipeline(r: mcp.CallRun) -> list[str]:
    """Every metered component but the load client: mesh processes and services."""
    assert r.cpu is not None
    return [k for k in r.cpu.usage if k != LOAD_CLIENT]


def _services(r: mcp.CallRun) -> list[str]:
    """The pipeline without the web process: outbox, push, Postgres, Redis, Kafka."""
    return [k for k in _pipeline(r) if not k.startswith("web")]


async def s_mcp(env: Env, ctx: dict, plan: Plan) -> Section:  # type: ignore[type-arg]
    sec = Section("9. Remote MCP tool calls vs REST")
    topo: Topology = ctx["topology"]
    cast = ctx["latency_cast"]
    rate, seconds = plan.mcp_rate, plan.mcp_seconds
    client = Client(topo.urls)
    try:
        await client.prewarm(16)
        # Warm-up of both paths (connections, prepared statements, the SDK's first calls).
        for over in mcp.OVER:
            await mcp.run(cast, client, over=over, rate=rate, seconds=2.0)
        runs: list[tuple[str, mcp.CallRun]] = []
        for label, over in (("REST", "rest"), ("MCP, API key", "mcp"),
                            ("MCP, access token", "mcp-token"), ("REST again", "rest")):
            runs.append((label, await mcp.run(cast, client, over=over, rate=rate,
                                              seconds=seconds,
                                              meter=env.meter(topo.named()))))
    finally:
        client.close()
    rest, m, mt, rest2 = (r for _, r in runs)
    if any(r.cpu is None or not r.ok for _, r in runs):
        sec.row("tool call p99", "n/a", "", "", f"≤ {TARGET_P99:g} ms", verdict(False))
        sec.note("A run had no successful calls: " + ", ".join(
            f"{label}: {r.ok} ok, {len(r.errors)} errors"
            + (f" (first: `{r.errors[0]}`)" if r.errors else "") for label, r in runs))
        return sec
    bases = (rest, rest2)
    d, bd = m.dist(), rest.dist()
    sec.row(f"tool call p50 / p99 at {rate:g} calls/s (half `mesh_whoami`, half "
            "`mesh_send_message`)", f"{ms(d, 'p50')} / {ms(d, 'p99')}",
            f"{ms(bd, 'p50')} / {ms(bd, 'p99')} (REST) · "
            f"{ms(rest2.dist(), 'p50')} / {ms(rest2.dist(), 'p99')} (REST again)",
            fmt_ratio(on_over_off(d.p99, (bd.p99, rest2.dist().p99))) + " REST's p99",
            f"p99 ≤ {TARGET_P99:g} ms", verdict(d.p99 <= TARGET_P99))
    t = mt.dist()
    sec.row("… with the access token as bearer (as REST) p50 / p99", f"{ms(t, 'p50')} / "
            f"{ms(t, 'p99')}", "", fmt_ratio(on_over_off(t.p99, (bd.p99, rest2.dist().p99)))
            + " REST's p99", f"p99 ≤ {TARGET_P99:g} ms", verdict(t.p99 <= TARGET_P99))
    for kind in mcp.KINDS:
        k, kb = m.dist(kind), rest.dist(kind)
        sec.row(f"… `{mcp.TOOLS[kind]}` vs `{mcp.REST[kind]}` p50 / p99",
                f"{ms(k, 'p50')} / {ms(k, 'p99')}", f"{ms(kb, 'p50')} / {ms(kb, 'p99')}",
                fmt_ratio(on_over_off(k.p50, (kb.p50, rest2.dist(kind).p50))) + " (p50)",
                "", verdict(None))
    for label, names in (("web process", lambda r: [k for k in _pipeline(r)
                                                     if k.startswith("web")]),
                         ("services (outbox, push, Postgres, Redis, Kafka)", _services),
                         ("whole pipeline", _pipeline)):
        on = m.cpu_ms(names(m))
        offs = [r.cpu_ms(names(r)) for r in bases]
        sec.row(f"CPU per call, {label} (API key; access token)",
                f"{fmt(on, 'ms')}; {fmt(mt.cpu_ms(names(mt)), 'ms')}",
                " / ".join(fmt(v, "ms") for v in offs) + " (REST, REST again)",
                fmt_ratio(on_over_off(on, offs)) + " REST's mean", "", verdict(None))

    sec.note(f"The latency scenario's cast ({len(cast.senders)} senders, "
             f"{len(cast.recipients)} recipients), open loop at {rate:g} calls/s for "
             f"{seconds:g} s per run, calls alternating read / send: over `/mcp` a JSON-RPC "
             f"`tools/call` of `mesh_whoami` / `mesh_send_message` (protocol {mcp.PROTOCOL}, "
             "stateless, JSON answers), over REST `GET /v1/mesh/me` / `POST /v1/mesh/tasks` "
             "with the same text. One sitting: REST, MCP with the API key as bearer (what a "
             "remote client is configured with: each call looks the key up and marks it used, "
             "a committed UPDATE), MCP with the agent's access token (as the REST runs), REST "
             "again "
             "(a 2 s warm-up of each path first); the two REST runs' difference is the "
             "machine's drift. Latency = answer read − request written (bench/client.py); "
             "a call counts if it succeeded (MCP: a `result` without `isError`). Ratios are "
             "MCP (API key unless said) ÷ the mean of the two REST runs. Nobody reads the "
             "recipients' inboxes; the sends' delivery work (outbox, push) is in the "
             "services' CPU.")
    sec.note("")
    sec.note("| run | offered | ok | errors | p50 | p90 | p99 | max | read p50 | read p99 "
             "| send p50 | send p99 | send lag p99 | other processes (% of a core) |")
    sec.note("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, r in runs:
        assert r.cpu is not None
        a, rd, sd = r.dist(), r.dist("read"), r.dist("send")
        sec.note(f"| {label} | {r.offered} | {r.ok} | {len(r.errors)} | {ms(a, 'p50')} "
                 f"| {ms(a, 'p90')} | {ms(a, 'p99')} | {ms(a, 'max')} | {ms(rd, 'p50')} "
                 f"| {ms(rd, 'p99')} | {ms(sd, 'p50')} | {ms(sd, 'p99')} "
                 f"| {fmt(Dist.of_seconds(r.send_lag).p99, 'ms')} "
                 f"| {fmt(100 * r.cpu.others / r.cpu.wall, '%')} |")
    sec.note("")
    sec.note("CPU ms per call by component:")
    sec.note("")
    sec.note("| component | REST | MCP, API key | MCP, access token | REST again "
             "| MCP key ÷ REST (mean) | MCP token ÷ REST (mean) |")
    sec.note("|---|---|---|---|---|---|---|")
    assert m.cpu is not None
    for name in m.cpu.usage:
        v = [r.cpu_ms([name]) for _, r in runs]
        sec.note(f"| {name} | {' | '.join(fmt(x) for x in v)} "
                 f"| {fmt_ratio(on_over_off(v[1], (v[0], v[3])))} "
                 f"| {fmt_ratio(on_over_off(v[2], (v[0], v[3])))} |")
    v = [r.cpu_ms(_pipeline(r)) for _, r in runs]
    sec.note(f"| **pipeline (no client)** | {' | '.join(f'**{fmt(x)}**' for x in v)} "
             f"| **{fmt_ratio(on_over_off(v[1], (v[0], v[3])))}** "
             f"| **{fmt_ratio(on_over_off(v[2], (v[0], v[3])))}** |")
    sec.note("")
    sec.note("Web process waiting for a core: " + ", ".join(
        f"{label} {fmt(r.cpu.share('web')[1], '%')}" for label, r in runs
        if r.cpu is not None and "web" in r.cpu.usage) + " of wall.")
    for label, r in runs:
        if r.errors:
            sec.note(f"\n{label}: {len(r.errors)} errors, first: `{r.errors[0]}`")
    return sec


RUNNERS: dict[str, Callable[[Env, dict, Plan], Awaitable[Section]]] = {  # type: ignore[type-arg]
    "mcp": s_mcp,
}

"""Report section for the daemon drain: events per second one ``mesh daemon``
handles from a backlog, and each event's CPU in the daemon and the gateway."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.cpu import LOAD_CLIENT
from bench.env import Env
from bench.load import make_cast
from bench.plan import Plan
from bench.report import Section, verdict
from bench.scenarios import daemon_drain
from bench.stats import fmt
from bench.topology import Topology


async def s_daemon_drain(env: Env, ctx: dict, plan: Plan) -> Section:  # type: ignore[type-arg]
    sec = Section("6b. One mesh daemon drains a backlog")
    topo: Topology = ctx["topology"]
    cast = await make_cast(topo.web.url, 1, 1)
    r = await daemon_drain.run(env, topo, cast.senders[0], cast.recipients[0],
                               n=plan.drain_events)
    if not r.ran or r.cpu is None or not r.events:
        sec.row("events handled per second", "not measured", "", "", "", verdict(None))
        sec.note(f"Not measured: {r.reason}")
        return sec
    cpu = r.cpu

    def per_event(names: list[str]) -> float:
        return 1000 * sum(cpu.usage[k].cpu for k in names if k in cpu.usage) / r.events

    gateway = [k for k in cpu.usage if k not in (LOAD_CLIENT, daemon_drain.DAEMON)]
    sec.row("events handled per second, one daemon, a no-op handler",
            f"{r.rate:,.0f} /s", f"{r.events:,} events in {r.seconds:.2f} s", "", "",
            verdict(None))
    sec.row("CPU per event: the daemon", fmt(per_event([daemon_drain.DAEMON]), "ms"), "", "",
            "", verdict(None))
    sec.row("CPU per event: the gateway (web, workers, services)", fmt(per_event(gateway), "ms"),
            "", "", "", verdict(None))
    sec.note(f"{plan.drain_events:,} messages queued for an agent no runtime reads, then "
             "`mesh daemon --handler bench.daemon_handler:noop --no-reply` with a fresh state "
             "folder; timed from the first acked event to the last (start-up left out), CPU "
             "metered over the same window.")
    sec.note("")
    sec.note("| component | CPU ms per event |")
    sec.note("|---|---|")
    for name in cpu.usage:
        if name != LOAD_CLIENT:
            sec.note(f"| {name} | {fmt(per_event([name]))} |")
    return sec


RUNNERS: dict[str, Callable[[Env, dict, Plan], Awaitable[Section]]] = {  # type: ignore[type-arg]
    "daemon_drain": s_daemon_drain,
}

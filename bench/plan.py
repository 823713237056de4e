"""What a bench run measures and for how long: the full plan and the quick smoke run."""

from __future__ import annotations

from dataclasses import dataclass

SCENARIOS = ("latency", "floor", "sends", "profile", "scaleout", "relay", "longpoll", "idle", "daemon",
             "daemon_drain", "webhooks", "tracing", "mcp", "a2a_blocking")


@dataclass(frozen=True)
class Plan:
    name: str
    rate: float = 200.0
    latency_seconds: float = 20.0
    low_rate: float = 20.0
    low_seconds: float = 10.0
    sweep: tuple[int, ...] = (4, 16, 32, 64)
    sweep_seconds: float = 10.0
    relay_rows: int = 50_000
    longpoll_tries: int = 50
    baseline_polls: int = 30
    idle_connections: int = 10_000
    idle_agents: int = 50
    idle_hold: float = 20.0
    daemon_idle: float = 5.0
    # daemon_drain: messages queued before one mesh daemon starts and drains them
    drain_events: int = 1_000
    # profile: one closed-loop run at this concurrency, py-spy on the web process and
    # the services' counters on (ADR 024)
    profile_concurrency: int = 16
    profile_seconds: float = 10.0
    profile_rate: int = 200          # py-spy samples per second
    # scaleout: 1 vs 2 of each mesh process; closed loop at the sweep's top level, then
    # open loop at ``rate``
    scaleout_sizes: tuple[int, ...] = (1, 2)
    scaleout_seconds: float = 8.0
    scaleout_latency_seconds: float = 8.0
    # floor: a bare uvicorn app at ``rate``, open loop, this long per mode (ADR 029)
    floor_seconds: float = 10.0
    # webhooks: events per recipient (32 of them) queued before the webhooks are
    # registered, then the open loop at ``rate`` for this long (webhook and SSE)
    webhook_fill: int = 400
    webhook_seconds: float = 15.0
    # mcp: tool calls over /mcp vs the same REST calls, open loop at this rate (ADR 040)
    mcp_rate: float = 100.0
    mcp_seconds: float = 20.0
    # a2a_blocking: the open loop at ``rate`` (``latency_seconds``) while this many agents
    # × this many blocking SendMessage calls each wait out a window this long (ADR 036)
    a2a_callers: int = 50
    a2a_per_caller: int = 4
    a2a_window_seconds: float = 60.0


FULL = Plan("full")
QUICK = Plan("quick", latency_seconds=5.0, low_seconds=3.0, sweep=(16,), sweep_seconds=4.0, relay_rows=5_000,
             longpoll_tries=15, baseline_polls=10, idle_connections=2_000, idle_agents=20,
             idle_hold=5.0, daemon_idle=3.0, profile_seconds=4.0, scaleout_seconds=3.0,
             scaleout_latency_seconds=3.0, floor_seconds=2.0,
             webhook_fill=100, webhook_seconds=5.0, mcp_seconds=5.0, drain_events=200)

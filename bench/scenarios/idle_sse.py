"""Scenario 5: idle SSE connections on one web process.

A web process of its own (the Procfile command, one uvicorn worker; its
open-file limit is raised by inheriting this process's) gets ``count`` SSE
connections, spread over ``agents`` agents, opened ``parallel`` at a time by
the lean client (one ``asyncio.Protocol`` each). Its RSS is read before (after
a warm-up of a few connections opened and closed) and after they are all
open and have idled ``hold`` seconds; the difference per connection is the
cost of one idle stream. CPU time the web process burns while they idle is
reported too (keep-alive pings, periodic Postgres re-checks).

Then one message is sent to one agent: every stream of that agent must get it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import psutil

from bench.client import Client, HttpError, SseEvent, SseStream, now
from bench.load import Agent, inbox_seqs, message_id_of, new_message_id, open_stream, send


@dataclass
class IdleRun:
    wanted: int
    opened: int = 0
    failed: list[str] = field(default_factory=list)
    open_seconds: float = 0.0
    rss_before_kb: int = 0
    rss_after_kb: int = 0
    idle_cpu_seconds: float = 0.0
    hold_seconds: float = 0.0
    fds_after: int = 0
    probe_streams: int = 0
    probe_delivered: int = 0
    probe_api_latency: float = float("nan")
    probe_first_latency: float = float("nan")
    probe_last_latency: float = float("nan")

    @property
    def kb_per_connection(self) -> float:
        return (self.rss_after_kb - self.rss_before_kb) / self.opened if self.opened else float("nan")


async def run(base_url: str, database_url: str, web_pid: int, sender: Agent, agents: list[Agent],
              *, count: int, hold: float, parallel: int = 100) -> IdleRun:
    result = IdleRun(count)
    proc = psutil.Process(web_pid)
    after = await inbox_seqs(database_url, [a.agent_id for a in agents])
    probe_id: str | None = None
    probe_sent_at = 0.0
    probe_times: list[float] = []

    def on_event(_s: SseStream, ev: SseEvent) -> None:
        if probe_id is not None and message_id_of(ev) == probe_id:
            probe_times.append(ev.at - probe_sent_at)

    # Warm-up: the code paths of a stream are loaded and the pools filled.
    warm = [await open_stream(base_url, agents[i % len(agents)], after[agents[i % len(agents)]
                              .agent_id]) for i in range(20)]
    for s in warm:
        s.close()
    await asyncio.sleep(2.0)
    result.rss_before_kb = proc.memory_info().rss // 1024

    streams: list[SseStream] = []
    by_agent: dict[str, list[SseStream]] = {}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def opener() -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            agent = agents[i % len(agents)]
            try:
                s = await open_stream(base_url, agent, after[agent.agent_id], on_event)
            except (OSError, RuntimeError, HttpError) as exc:
                result.failed.append(f"{type(exc).__name__}: {exc}")
                continue
            streams.append(s)
            by_agent.setdefault(agent.agent_id, []).append(s)

    start = now()
    await asyncio.gather(*(opener() for _ in range(parallel)))
    result.open_seconds = now() - start
    result.opened = len(streams)
    cpu0 = sum(proc.cpu_times()[:2])
    t0 = now()
    await asyncio.sleep(hold)
    result.hold_seconds = now() - t0
    result.idle_cpu_seconds = sum(proc.cpu_times()[:2]) - cpu0
    result.rss_after_kb = proc.memory_info().rss // 1024
    result.fds_after = proc.num_fds()

    # One message to one agent: each of its streams must deliver it.
    target = agents[0]
    result.probe_streams = len(by_agent.get(target.agent_id, []))
    client = Client(base_url)
    probe_id = new_message_id()
    probe_sent_at = now()
    resp = await send(client, sender, target.agent_id, probe_id)
    client.close()
    result.probe_api_latency = resp.latency
    if resp.status == 201:
        deadline = now() + 15
        while len(probe_times) < result.probe_streams and now() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    result.probe_delivered = len(probe_times)
    if probe_times:
        result.probe_first_latency = min(probe_times)
        result.probe_last_latency = max(probe_times)
    closed_before = sum(1 for s in streams if s.closed.done())
    if closed_before:
        result.failed.append(f"{closed_before} streams were closed by the server while idle")
    for s in streams:
        s.close()
    return result

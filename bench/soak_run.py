"""One soak run: many agents send at a fixed rate while the fault
suite's faults (tests/support/faults.py) strike at random and readers go offline
and catch up; then every recipient is counted and the outbox checked.

Used by ``bench/soak.py`` (``make soak``, the long run in its own stack) and by
``tests/test_soak_short.py`` (the short run in the test session's stack).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import asyncpg
import httpx

from app.platform.db import create_pool
from app.platform.settings import Settings
from bench.soak_sample import Sampler
from devstack.stack import Stack
from tests.support.faults import (
    Fault,
    Procs,
    Topology,
    cut_streams_repeatedly,
    kill_push_worker,
    kill_relay_mid_batch,
    more_accepted,
    processes,
    restart_redis_losing_streams,
    stop_bus_for_10s,
    stop_postgres,
)
from tests.support.isolated import wait_until
from tests.support.load import (
    InboxReader,
    LongPollCollector,
    SseCollector,
    Tally,
    send_until_accepted,
    tally,
)
from tests.support.meshapi import AgentHandle, MeshFactory

# Agents per owner; each owner's agents share a group, and every agent is a friend
# of one agent of the next owner (so both relationship kinds carry messages).
PER_OWNER = 10
SENDERS = 64  # requests in flight at most; a backlog during an outage waits for them


@dataclass
class SoakPlan:
    seconds: float
    rate: float  # sends per second, open loop
    agents: int
    seed: int
    scale: int = 2  # web, outbox and push processes of each kind (+ one cron)
    longpoll_share: float = 1 / 3
    fault_gap: tuple[float, float] = (20.0, 60.0)  # seconds of sends between faults
    offline: tuple[float, float] = (10.0, 60.0)  # seconds of sends a reader misses
    offline_share: float = 0.1  # readers offline at once, at most
    sample_every: float = 5.0
    warmup: float = 120.0
    heal_timeout: float = 300.0


@dataclass
class FaultRun:
    kind: str
    at: float  # seconds since the start of the sends
    took: float
    error: str | None = None


@dataclass
class SoakResult:
    plan: SoakPlan
    bus: str
    seconds: float = 0.0
    offered: int = 0
    accepted: int = 0
    retries: int = 0
    faults: list[FaultRun] = field(default_factory=list)
    offline_episodes: int = 0
    tallies: dict[str, tuple[str, Tally]] = field(default_factory=dict)  # agent → (kind, t)
    outbox: dict[str, int] = field(default_factory=dict)
    sampler: Sampler | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def delivered_ok(self) -> bool:
        return all(t.clean for _, t in self.tallies.values())


def soak_settings(base: Settings, bus: str) -> Settings:
    """The fault suite's settings (tests/test_faults.py) on a topic of this run."""
    run = uuid.uuid4().hex[:8]
    return Settings(**(base.model_dump() | {
        "bus": bus, "bus_topic": f"soak-{run}", "push_group": f"push-soak-{run}",
        "sse_recheck_seconds": 2.0, "relay_retry_base_seconds": 0.2, "relay_batch_size": 200,
        # One load client stands for agents on many hosts: no per-address auth throttle.
        "auth_throttle_enabled": False}))


def faults(step: int) -> dict[str, Fault]:
    """Every fault kind of the fault suite, sized to a step of ``step`` sends."""
    async def cut(procs: Procs) -> None:
        await cut_streams_repeatedly(procs, until=len(procs.log.accepted) + 4 * step,
                                     step=max(1, step // 5))

    return {
        "kill-relay": lambda p: kill_relay_mid_batch(p, step=step, times=1),
        "kill-push": lambda p: kill_push_worker(p, step=step, times=1),
        "bus-outage-10s": lambda p: stop_bus_for_10s(p, lead=0),
        "redis-restart-streams-lost": lambda p: restart_redis_losing_streams(p, lead=0),
        "cut-streams": cut,
        "postgres-outage-10s": lambda p: stop_postgres(p, lead=0, seconds=10.0),
        "postgres-restart": lambda p: stop_postgres(p, lead=0, seconds=0.0),
    }


@dataclass
class Cast:
    agents: list[AgentHandle]
    pairs: list[tuple[AgentHandle, AgentHandle]]


async def build_cast(mesh: MeshFactory, n: int) -> Cast:
    owners = [await mesh.owner() for _ in range(math.ceil(n / PER_OWNER))]
    teams: list[list[AgentHandle]] = []
    for i, owner in enumerate(owners):
        team = [await owner.agent(f"soak{j}") for j in range(min(PER_OWNER, n - i * PER_OWNER))]
        group = f"g-{uuid.uuid4().hex[:10]}"
        resp = await owner.post("/v1/groups", {"group_id": group, "name": "soak"})
        assert resp.status_code == 201, resp.text
        for agent in team:
            resp = await owner.post(f"/v1/groups/{group}/members", {"agent_id": agent.agent_id})
            assert resp.status_code == 201, resp.text
        teams.append(team)
    pairs = [(a, b) for team in teams for a in team for b in team if a is not b]
    if len(teams) > 1:
        for i, team in enumerate(teams):
            nxt = teams[(i + 1) % len(teams)]
            for a, b in zip(team, nxt, strict=False):
                if not any(x is a and y is b for x, y in pairs):
                    await mesh.befriend(a, b)
                    pairs += [(a, b), (b, a)]
    return Cast([a for team in teams for a in team], pairs)


async def inbox_seqs(pool: asyncpg.Pool, agents: list[AgentHandle]) -> dict[str, int]:
    return {r["agent_id"]: r["inbox_seq"] for r in await pool.fetch(
        "SELECT agent_id, inbox_seq FROM agents WHERE agent_id = ANY($1::text[])",
        [a.agent_id for a in agents])}


async def outbox_by_status(pool: asyncpg.Pool, topic: str) -> dict[str, int]:
    rows = await pool.fetch("SELECT status, count(*) AS n FROM outbox_events "
                            "WHERE topic = $1 GROUP BY status", topic)
    return {"pending": 0, "sent": 0, "failed": 0} | {r["status"]: r["n"] for r in rows}


@contextlib.asynccontextmanager
async def web_clients(procs: Procs) -> AsyncIterator[list[httpx.AsyncClient]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(httpx.AsyncClient(base_url=w.url, timeout=30))
               for w in procs.webs]


class Soak:
    def __init__(self, plan: SoakPlan, procs: Procs, cast: Cast, rng: random.Random,
                 result: SoakResult) -> None:
        self.plan, self.procs, self.cast, self.rng, self.result = plan, procs, cast, rng, result
        self.first_pass_done = asyncio.Event()
        self.sends_done = asyncio.Event()
        self.faulting = False  # a fault paced by sends must see sends until it has healed
        self.t0 = time.monotonic()
        self.deadline = self.t0 + plan.seconds

    def sending(self) -> bool:
        return (time.monotonic() < self.deadline or not self.first_pass_done.is_set()
                or self.faulting)

    async def send(self) -> None:
        run = uuid.uuid4().hex[:8]
        queue: asyncio.Queue[tuple[AgentHandle, AgentHandle, str]] = asyncio.Queue()

        async def worker() -> None:
            while True:
                sender, recipient, message_id = await queue.get()
                await send_until_accepted(sender, recipient, message_id, self.procs.log)
                queue.task_done()

        workers = [asyncio.create_task(worker()) for _ in range(SENDERS)]
        try:
            n, start = 0, time.monotonic()
            while self.sending():
                # Everything due by now, at once: on a starved event loop one send per
                # wake-up would quietly lower the offered rate.
                due = int((time.monotonic() - start) * self.plan.rate) + 1
                while n < due:
                    n += 1
                    queue.put_nowait((*self.rng.choice(self.cast.pairs), f"m-soak-{run}-{n}"))
                await asyncio.sleep(max(0.0, start + n / self.plan.rate - time.monotonic()))
            self.result.offered = n
            await queue.join()
        finally:
            self.sends_done.set()
            for w in workers:
                w.cancel()

    async def after_sends(self, n: int) -> bool:
        """Wait for ``n`` more accepted sends; False if the sends ended first."""
        waiting = asyncio.create_task(more_accepted(self.procs, n))
        ended = asyncio.create_task(self.sends_done.wait())
        try:
            await asyncio.wait({waiting, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiting, ended):
                task.cancel()
        return not self.sends_done.is_set()

    def messages(self, seconds: tuple[float, float]) -> int:
        return max(1, int(self.rng.uniform(*seconds) * self.plan.rate))

    async def inject(self) -> None:
        kinds = faults(step=max(20, int(self.plan.rate * 3)))
        order = list(kinds)
        self.rng.shuffle(order)  # the first pass: every kind once, in a random order
        while order or time.monotonic() < self.deadline - 30:
            if not await self.after_sends(self.messages(self.plan.fault_gap)):
                return
            kind = order.pop(0) if order else self.rng.choice(list(kinds))
            started = time.monotonic()
            run = FaultRun(kind, started - self.t0, 0.0)
            self.faulting = True
            try:
                async with asyncio.timeout(self.plan.heal_timeout):
                    await kinds[kind](self.procs)
            except Exception as exc:  # recorded in the report; the run goes on
                run.error = f"{type(exc).__name__}: {exc}"[:500]
            finally:
                self.faulting = False
            run.took = time.monotonic() - started
            self.result.faults.append(run)
            if not order:
                self.first_pass_done.set()
        self.first_pass_done.set()

    async def churn(self, readers: list[InboxReader]) -> None:
        """Readers go offline for a while and resume after their last seq."""
        at_once = max(1, int(len(readers) * self.plan.offline_share))

        async def one() -> None:
            while time.monotonic() < self.deadline - 30:
                if not await self.after_sends(self.messages(self.plan.fault_gap)):
                    return
                online = [r for r in readers if r.running]
                if len(online) < 2:
                    continue
                reader = self.rng.choice(online)
                await reader.stop()
                self.result.offline_episodes += 1
                try:
                    await self.after_sends(self.messages(self.plan.offline))
                finally:
                    reader.start()

        await asyncio.gather(*(one() for _ in range(at_once)))


async def progress_lines(soak: Soak, say: Callable[[str], None], every: float = 60.0) -> None:
    while True:
        await asyncio.sleep(every)
        log = soak.procs.log
        say(f"soak: {time.monotonic() - soak.t0:.0f} s, {len(log.accepted):,} accepted, "
            f"{log.retries:,} retries, {len(soak.result.faults)} faults "
            f"({sum(1 for f in soak.result.faults if f.error)} failed)")


async def run_soak(plan: SoakPlan, settings: Settings, stack: Stack,
                   say: Callable[[str], None] | None = None) -> SoakResult:
    """Run the soak against ``stack`` with ``settings`` (see :func:`soak_settings`);
    ``say`` gets a progress line every minute."""
    result = SoakResult(plan, settings.bus_kind)
    rng = random.Random(plan.seed)
    topology = Topology(web=plan.scale, outbox=plan.scale, push=plan.scale, cron=1)
    async with contextlib.AsyncExitStack() as later:
        async with processes(settings, stack, topology) as procs, web_clients(procs) as https, \
                MeshFactory.connect(procs.webs[0].url) as mesh:
            cast = await build_cast(mesh, plan.agents)
            readers: list[InboxReader] = []
            for i, agent in enumerate(cast.agents):
                agent.http = https[i % len(https)]
                url = procs.webs[i % len(procs.webs)].url
                longpoll = rng.random() < plan.longpoll_share
                readers.append(LongPollCollector(url, agent, slim=True) if longpoll
                               else SseCollector(url, agent, slim=True))
            procs.collectors = list(readers)
            sampler = result.sampler = Sampler(procs, plan.sample_every)
            for r in readers:
                r.start()
            soak = Soak(plan, procs, cast, rng, result)
            sampling = asyncio.create_task(sampler.run())
            side = [asyncio.create_task(soak.inject()), asyncio.create_task(soak.churn(readers))]
            talk = asyncio.create_task(progress_lines(soak, say)) if say else None
            try:
                await soak.send()
                await asyncio.gather(*side)
            finally:
                for task in side:
                    task.cancel()
                if talk is not None:
                    talk.cancel()
            result.seconds = time.monotonic() - soak.t0
            result.accepted, result.retries = len(procs.log.accepted), procs.log.retries
            for r in readers:
                if not r.running:
                    r.start()
            # Heal: every reader reaches its agent's last seq, the outbox drains.
            # (The pool opens only now: during the outages it would log every retry.)
            pool = await create_pool(settings, min_size=1, max_size=2)
            later.push_async_callback(pool.close)
            seqs = await inbox_seqs(pool, cast.agents)
            try:
                await asyncio.gather(*(r.wait_for(seqs[r.agent.agent_id], plan.heal_timeout)
                                       for r in readers))
            except TimeoutError:
                result.problems.append(f"readers did not reach their last seq within "
                                       f"{plan.heal_timeout:g} s")

            async def drained() -> bool:
                return not (await outbox_by_status(pool, settings.bus_topic))["pending"]

            with contextlib.suppress(AssertionError):  # the report says what is pending
                await wait_until(drained, "the outbox drained", timeout=plan.heal_timeout,
                                 interval=0.5)
            result.outbox = await outbox_by_status(pool, settings.bus_topic)
            await sampler.sample()  # the end figures: readers still connected
            sampling.cancel()
            for r in readers:
                await r.stop()
            for r in readers:
                kind = "long-poll" if isinstance(r, LongPollCollector) else "SSE"
                result.tallies[r.agent.agent_id] = (
                    kind, tally(procs.log, r, seqs[r.agent.agent_id]))
    return result

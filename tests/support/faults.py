"""The fault suite's faults, shared by tests/test_faults*.py and the soak (bench/soak.py).

Each fault acts on a running mesh (:class:`Procs`: real OS processes over the
stack's real services) while a load runs, paced by the number of accepted sends
(never by elapsed time, except where the outage's length is the scenario), and
returns once it has healed what it broke. A fault asserts what must hold while
it acts (e.g. 503 with Retry-After while Postgres is down).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import httpx
import redis.asyncio as aioredis

from app.platform.settings import Settings
from devstack.stack import Stack
from tests.support.load import SendLog
from tests.support.meshapi import AgentHandle
from tests.support.procs import MeshProcess


class Reader(Protocol):
    """An inbox follower (SSE or long-poll) a fault may cut."""

    agent: AgentHandle

    async def cut(self) -> None: ...


@dataclass
class Topology:
    """How many of each mesh process run (2 / 2 / 2 on one machine)."""

    web: int = 1
    outbox: int = 1
    push: int = 1
    cron: int = 0


@dataclass
class Procs:
    webs: list[MeshProcess]
    outboxes: list[MeshProcess]
    pushes: list[MeshProcess]
    stack: Stack
    settings: Settings
    log: SendLog
    collectors: list[Reader] = field(default_factory=list)
    crons: list[MeshProcess] = field(default_factory=list)

    # The faults' victims are the last process of each kind: with two of a kind
    # the first one lives through the whole run (the soak judges its RSS/fds).
    @property
    def web(self) -> MeshProcess:
        return self.webs[-1]

    @property
    def outbox(self) -> MeshProcess:
        return self.outboxes[-1]

    @property
    def push(self) -> MeshProcess:
        return self.pushes[-1]

    @property
    def all(self) -> list[MeshProcess]:
        return [*self.webs, *self.outboxes, *self.pushes, *self.crons]


Fault = Callable[[Procs], Awaitable[None]]


@contextlib.asynccontextmanager
async def processes(settings: Settings, stack: Stack, topology: Topology | None = None,
                    **extra: object) -> AsyncIterator[Procs]:
    """Start the topology's processes (``extra``: more ``MESH_*`` values for all)."""
    t = topology or Topology()
    procs = Procs([MeshProcess("web", settings, **extra) for _ in range(t.web)],
                  [MeshProcess("outbox", settings, **extra) for _ in range(t.outbox)],
                  [MeshProcess("push", settings, **extra) for _ in range(t.push)],
                  stack, settings, SendLog(),
                  crons=[MeshProcess("cron", settings, log_level="DEBUG", **extra)
                         for _ in range(t.cron)])
    try:
        await asyncio.gather(*(p.start() for p in procs.all))
        yield procs
    finally:
        for proc in procs.all:
            proc.stop_quietly()


async def more_accepted(procs: Procs, n: int) -> None:
    await procs.log.wait_accepted(len(procs.log.accepted) + n)


# --- the faults -------------------------------------------------------------------

async def kill_relay_mid_batch(procs: Procs, step: int = 150, times: int = 2) -> None:
    for _ in range(times):
        await more_accepted(procs, step)
        procs.outbox.kill9()
        await more_accepted(procs, step * 2 // 3)
        await procs.outbox.restart()


async def kill_push_worker(procs: Procs, step: int = 150, times: int = 2) -> None:
    for _ in range(times):
        await more_accepted(procs, step)
        procs.push.kill9()
        await more_accepted(procs, step * 2 // 3)
        await procs.push.restart()


async def stop_bus_for_10s(procs: Procs, lead: int = 200, seconds: float = 10.0) -> None:
    await more_accepted(procs, lead)
    service = {"kafka": procs.stack.kafka, "nats": procs.stack.nats,
               "redis": procs.stack.redis}[procs.settings.bus_kind]
    assert service is not None
    service.stop()
    started = time.monotonic()
    try:
        # The outage itself must last ≥ 10 s (that is the scenario, not a wait
        # for an event); sends keep being accepted meanwhile.
        before = len(procs.log.accepted)
        await asyncio.sleep(seconds)
        assert len(procs.log.accepted) > before, "sends were not accepted during the outage"
    finally:
        service.start()
    assert time.monotonic() - started >= seconds


async def restart_redis_losing_streams(procs: Procs, lead: int = 300) -> None:
    await more_accepted(procs, lead)
    redis = aioredis.from_url(procs.settings.redis_url)
    try:
        await redis.flushall()  # the streams (and a Redis bus's records) are gone
    finally:
        await redis.aclose()
    assert procs.stack.redis is not None
    procs.stack.redis.stop()
    procs.stack.redis.start()


async def cut_streams_repeatedly(procs: Procs, until: int, step: int = 25,
                                 seed: int = 7) -> int:
    """Cut a random reader's connection every ``step`` accepted sends until ``until``
    sends are accepted; returns the number of cuts."""
    rng = random.Random(seed)
    cuts = 0
    while len(procs.log.accepted) < until:
        await procs.log.wait_accepted(min(len(procs.log.accepted) + step, until))
        await rng.choice(procs.collectors).cut()
        cuts += 1
    return cuts


# --- Postgres ------------------------------------------------------

# A request during the outage must be answered well within this (no hang).
ANSWER_WITHIN = 8.0


async def probe(url: str, who: dict[str, str], method: str, path: str,
                **kw: object) -> int:
    """One request during an outage: a 503 must carry Retry-After and be problem+json."""
    async with httpx.AsyncClient(base_url=url, timeout=ANSWER_WITHIN) as http:
        resp = await http.request(method, path, headers=who, **kw)  # type: ignore[arg-type]
        if resp.status_code == 503:
            assert int(resp.headers["Retry-After"]) >= 1
            assert resp.headers["content-type"].startswith("application/problem+json")
        return resp.status_code


async def stop_postgres(procs: Procs, lead: int = 200, seconds: float = 10.0) -> list[int]:
    """Stop Postgres for ``seconds`` (0: a plain restart) while probing a send, a
    long-poll and an SSE stream on every web process: every answer must be 503."""
    await more_accepted(procs, lead)
    postgres = procs.stack.postgres
    assert postgres is not None
    sender, recipient = procs.collectors[0].agent, procs.collectors[1].agent
    await asyncio.to_thread(postgres.stop_fast)
    started = time.monotonic()
    statuses: list[int] = []
    try:
        # The outage must last `seconds` (that is the scenario); meanwhile probe.
        while True:
            for web in procs.webs:
                statuses += await asyncio.gather(
                    probe(web.url, sender.headers, "POST", "/v1/mesh/tasks", json={
                        "to_agent_id": recipient.agent_id,
                        "message": {"parts": [{"kind": "text", "text": "probe"}]}}),
                    probe(web.url, recipient.headers, "GET", "/v1/mesh/inbox",
                          params={"wait": 2}),
                    probe(web.url, recipient.headers, "GET", "/v1/mesh/inbox/stream"))
            if time.monotonic() - started >= seconds:
                break
    finally:
        await asyncio.to_thread(postgres.start)
    assert time.monotonic() - started >= seconds
    assert statuses and set(statuses) == {503}, statuses
    return statuses


async def stop_postgres_for_10s(procs: Procs) -> None:
    await stop_postgres(procs, seconds=10.0)

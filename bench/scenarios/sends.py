"""Scenario 2a: sustained accepted sends, closed loop.

``concurrency`` workers each keep one request in flight: send, wait for the
answer, send again, for ``seconds``. Throughput is accepted (201) sends per
second of wall time; latency is per request. The relay and push processes
run meanwhile (the whole pipeline, co-located), and the outbox backlog left at
the end says whether the relay kept up with the write rate.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import asyncpg

from bench.client import Client, HttpError, now
from bench.cpu import CpuMeter, Interval, Measure
from bench.load import Cast, db_now, new_message_id, relay_batches_since, send
from bench.stats import Dist


@dataclass
class SendsRun:
    concurrency: int
    seconds: float = 0.0
    accepted: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    backlog_after: int = 0          # outbox rows still pending when the load stopped
    drain_seconds: float = 0.0      # how long the relay then took to empty the outbox
    cpu: Interval | None = None     # CPU per component while the load ran
    relay_batches: int = 0          # relay transactions that carried this run's rows
    relay_rows: int = 0

    @property
    def rate(self) -> float:
        return self.accepted / self.seconds if self.seconds else 0.0

    @property
    def dist(self) -> Dist:
        return Dist.of_seconds(self.latencies)


async def run(client: Client, cast: Cast, *, concurrency: int, seconds: float,
              database_url: str | None = None, topic: str = "",
              meter: CpuMeter | None = None) -> SendsRun:
    result = SendsRun(concurrency)
    rng = random.Random(concurrency)
    db_start = await db_now(database_url) if database_url else None
    await client.prewarm(concurrency)
    start = now()
    end = start + seconds
    last = start

    async def worker() -> None:
        nonlocal last
        while now() < end:
            sender = rng.choice(cast.senders)
            recipient = rng.choice(cast.recipients)
            try:
                resp = await send(client, sender, recipient.agent_id, new_message_id())
            except HttpError as exc:
                result.errors.append(str(exc))
                continue
            last = max(last, resp.done_at)
            if resp.status == 201:
                result.accepted += 1
                result.latencies.append(resp.latency)
            else:
                result.errors.append(f"HTTP {resp.status}: {resp.body[:200]!r}")

    measure = Measure(meter) if meter is not None else None
    if measure is not None:
        with measure:
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.cpu = measure.result
    else:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.seconds = last - start
    if database_url:
        result.backlog_after, result.drain_seconds = await _drain(database_url, topic)
        result.relay_rows, result.relay_batches = await relay_batches_since(database_url, topic,
                                                                       db_start)
    return result


async def _drain(database_url: str, topic: str, timeout: float = 120.0) -> tuple[int, float]:
    conn = await asyncpg.connect(database_url)
    try:
        sql = "SELECT count(*) FROM outbox_events WHERE status = 'pending' AND topic = $1"
        backlog = await conn.fetchval(sql, topic)
        start = now()
        while await conn.fetchval(sql, topic) and now() - start < timeout:  # noqa: ASYNC110 (polls Postgres)
            await asyncio.sleep(0.05)
        return int(backlog), now() - start
    finally:
        await conn.close()

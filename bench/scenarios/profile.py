"""Scenario 2c: where a send goes — one closed-loop ``sends`` run with the meters on.

The same closed loop as scenario 2 (same cast, one concurrency level), run once
more with:

* py-spy sampling the (first) web process from outside (``bench.profile``);
* ``pg_stat_statements`` tracking switched on and reset just before;
* Redis ``INFO commandstats`` and the broker's JMX request counters read just
  before and after (``bench.counters``).

The service counters' window runs from just before the load until the relay
has drained the outbox and a second more (so the relay's and the push
worker's work for these sends is in it); the profile covers the load only.
Kept out of the sweep so the sweep's figures carry no profiler.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from bench.client import Client, now
from bench.counters import (
    BENCH_TAG,
    KafkaJmx,
    PgCounts,
    PgStatements,
    delta_commands,
    delta_counts,
    redis_commandstats,
)
from bench.env import Env
from bench.load import Cast
from bench.profile import Recorder, Summary, can_profile, summarize
from bench.scenarios import sends
from bench.topology import Topology


@dataclass
class ProfileRun:
    run: sends.SendsRun
    web_share: float                    # fraction of the requests the profiled web process got
    counted_seconds: float = 0.0        # the service counters' window
    profile: Summary | None = None
    raw: Path | None = None
    pg: PgCounts | None = None
    redis: dict[str, tuple[int, float]] | None = None
    kafka: dict[str, int] | None = None
    why_not: dict[str, str] = field(default_factory=dict)


async def _drain(database_url: str, topic: str, timeout: float = 60.0) -> None:
    conn = await asyncpg.connect(database_url, statement_cache_size=0)
    try:
        sql = ("SELECT EXISTS (SELECT 1 FROM outbox_events "
               f"WHERE status = 'pending' AND topic = $1) AS {BENCH_TAG}")
        start = now()
        while await conn.fetchval(sql, topic) and now() - start < timeout:  # noqa: ASYNC110 (polls Postgres)
            await asyncio.sleep(0.05)
    finally:
        await conn.close()


async def run(env: Env, topo: Topology, cast: Cast, *, concurrency: int, seconds: float,
              rate: int) -> ProfileRun:
    db = env.settings.database_url
    client = Client(topo.urls)
    await sends.run(client, cast, concurrency=concurrency, seconds=2.0)   # warm-up
    web = topo.web
    assert web.proc is not None
    why_not: dict[str, str] = {}
    spy_error = await asyncio.to_thread(can_profile, web.proc.pid)
    if spy_error:
        why_not["profile"] = spy_error
    kafka: KafkaJmx | None = None
    if env.kafka_jmx_port is None:
        why_not["kafka"] = "the bus is not the embedded Kafka"
    elif (reason := KafkaJmx.available()) is not None:
        why_not["kafka"] = reason
    else:
        kafka = KafkaJmx(env.kafka_jmx_port)
        try:
            await kafka.start()
        except Exception as exc:
            why_not["kafka"] = f"JMX reader failed: {exc}"[:400]
            await kafka.close()
            kafka = None
    raw = env.root / "web-profile.txt"
    recorder = Recorder(web.proc.pid, raw, rate) if not spy_error else None
    result: ProfileRun
    try:
        async with PgStatements(db) as pg:
            await pg.reset()
            r0 = await redis_commandstats(env.settings.redis_url)
            k0 = await kafka.snapshot() if kafka else {}
            t0 = now()
            extra = {}
            if recorder is not None:
                await recorder.start()
                assert recorder.proc is not None
                extra["py-spy (profiler)"] = recorder.proc.pid
            load = await sends.run(client, cast, concurrency=concurrency, seconds=seconds,
                                   meter=env.meter(topo.named(), extra))
            if recorder is not None:
                await recorder.stop()
            await _drain(db, env.settings.bus_topic)
            await asyncio.sleep(1.0)   # the push worker finishes
            k1 = await kafka.snapshot() if kafka else {}
            r1 = await redis_commandstats(env.settings.redis_url)
            counted = now() - t0
            pg_counts = await pg.read()
        result = ProfileRun(load, 1 / topo.size, counted, pg=pg_counts,
                            redis=delta_commands(r0, r1), why_not=why_not)
        if kafka is not None:
            result.kafka = delta_counts(k0, k1)
        if recorder is not None and raw.exists():
            result.profile, result.raw = summarize(raw.read_text()), raw
    finally:
        client.close()
        if kafka is not None:
            with contextlib.suppress(Exception):
                await kafka.close()
    return result

"""The whole delivery pipeline in the test's event loop: web + relay + push.

Fault tests that kill processes run the workers as subprocesses instead
(tests/support/procs.py); everything else uses this in-process form, which
talks to the same real Postgres, Redis and Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

import redis.asyncio as aioredis

from app import db
from app.settings import Settings
from tests.support.servers import serve_app
from workers.bus import BusOptions, create_publisher, create_subscriber
from workers.push import Push
from workers.relay import Relay


@dataclass
class Pipeline:
    url: str
    settings: Settings
    relay: Relay
    push: Push


@contextlib.asynccontextmanager
async def run_workers(settings: Settings) -> AsyncIterator[tuple[Relay, Push]]:
    options = BusOptions(publish_timeout=5.0, connect_timeout=20.0, claim_idle=5.0,
                         claim_interval=1.0, max_record_bytes=settings.bus_max_record_bytes)
    pool = await db.create_pool(settings, min_size=1, max_size=4)
    publisher = create_publisher(settings, options)
    await publisher.start()
    relay = Relay(settings, pool, publisher)
    await relay.start()
    subscriber = create_subscriber(settings, settings.push_group, f"test-{os.getpid()}", options)
    await subscriber.start()
    redis = aioredis.from_url(settings.redis_url)
    push = Push(settings, redis, subscriber)
    push_task = asyncio.create_task(push.run())
    try:
        yield relay, push
    finally:
        push.stop()
        await push_task
        await subscriber.stop()
        await relay.stop()
        await publisher.stop()
        await redis.aclose()
        await pool.close()


@contextlib.asynccontextmanager
async def run_pipeline(settings: Settings) -> AsyncIterator[Pipeline]:
    async with run_workers(settings) as (relay, push), serve_app(settings) as url:
        yield Pipeline(url, settings, relay, push)

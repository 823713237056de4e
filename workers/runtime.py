"""One process model for the workers: how a relay or push worker is built, run and stopped.

A worker module offers ``build(runtime) -> worker``: it asks the :class:`Runtime`
for what it needs (a Postgres pool, a Redis client, a started bus publisher or
subscriber) and returns an object with ``start()``, ``stop()`` and ``task`` (its
main loop). The runtime opens each resource on first use — waiting with backoff
for a broker or database that is not up yet, so start order never matters — and
closes them in reverse order after the worker stopped.

* :func:`running` — build, start, yield, stop: what tests use in-process
  (:func:`opened` alone gives the resources for a worker driven by hand).
* :func:`serve` — the same inside a process: logging, Sentry and the metrics port
  (:func:`workers.process.setup_process`), SIGTERM/SIGINT → a graceful stop (the
  batch in hand finishes), exit when the main loop dies so the supervisor
  restarts the process.
* :func:`main` — ``python -m workers.relay`` / ``python -m workers.push``.

See docs/decisions/010-worker-process-model.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, TypeVar

import asyncpg
import redis.asyncio as aioredis

from app.platform import db, tracing
from app.platform.retry import Backoff, retry
from app.platform.settings import Settings, load_settings
from workers.bus import (
    BusOptions,
    BusStartError,
    Publisher,
    Subscriber,
)
from workers.bus_factory import create_publisher, create_subscriber
from workers.process import setup_process, use_fast_event_loop

log = logging.getLogger("mesh.worker")


class Worker(Protocol):
    async def start(self) -> None:
        """Start the main loop as a background task."""

    async def stop(self) -> None:
        """Finish the work in hand, then end the main loop."""

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The main loop (None before ``start``)."""


W = TypeVar("W", bound=Worker)
Build = Callable[["Runtime"], Awaitable[W]]


def consumer_name() -> str:
    """Unique per worker instance: two push workers in one process (tests) must not
    share a Redis consumer's pending list."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


class Runtime:
    """The resources of one worker, opened on demand, closed by ``stack``."""

    def __init__(self, settings: Settings, stack: contextlib.AsyncExitStack, *,
                 bus_options: BusOptions | None = None,
                 stop: asyncio.Event | None = None) -> None:
        self.settings = settings
        self.bus_options = bus_options or BusOptions.from_settings(settings)
        # Set on shutdown: a wait for a dependency ends instead of outliving SIGTERM.
        self.stop = stop or asyncio.Event()
        self._stack = stack
        self._pool: asyncpg.Pool | None = None
        self._redis: aioredis.Redis | None = None

    async def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            self._pool = await retry(
                lambda: db.create_pool(self.settings, min_size=1, max_size=4),
                Backoff("db_connect", stop=self.stop),
                (OSError, asyncpg.CannotConnectNowError),
                "Postgres is not reachable yet; check MESH_DATABASE_URL and that it is up")
            self._stack.push_async_callback(self._pool.close)
        return self._pool

    async def redis(self) -> aioredis.Redis:
        if self._redis is None:
            # Lazy: connects on first command, and redis-py reconnects by itself.
            self._redis = aioredis.from_url(self.settings.redis_url)
            self._stack.push_async_callback(self._redis.aclose)
        return self._redis

    async def publisher(self) -> Publisher:
        publisher = create_publisher(self.settings, self.bus_options)
        await self._start_bus_client(publisher.start)
        self._stack.push_async_callback(publisher.stop)
        return publisher

    async def subscriber(self, group: str, consumer: str | None = None) -> Subscriber:
        consumer = consumer or consumer_name()
        subscriber = create_subscriber(self.settings, group, consumer, self.bus_options)
        await self._start_bus_client(subscriber.start)
        self._stack.push_async_callback(_quietly, subscriber.stop)
        log.info("bus %s: joined group %s as %s", self.settings.bus_kind, group, consumer)
        return subscriber

    async def _start_bus_client(self, start: Callable[[], Awaitable[None]]) -> None:
        # A worker started before Kafka must wait for it, not crash-loop.
        await retry(start, Backoff("bus_start", stop=self.stop), (BusStartError,))


async def _quietly(close: Callable[[], Awaitable[None]]) -> None:
    with contextlib.suppress(Exception):
        await close()


@contextlib.asynccontextmanager
async def opened(settings: Settings, *, bus_options: BusOptions | None = None,
                 stop: asyncio.Event | None = None) -> AsyncIterator[Runtime]:
    """A runtime whose resources are closed on exit (for a worker that is built but
    driven by hand, e.g. a test calling ``relay.drain()``)."""
    async with contextlib.AsyncExitStack() as stack:
        yield Runtime(settings, stack, bus_options=bus_options, stop=stop)


@contextlib.asynccontextmanager
async def running(build: Build[W], settings: Settings, *, bus_options: BusOptions | None = None,
                  stop: asyncio.Event | None = None) -> AsyncIterator[W]:
    """A started worker; on exit it is stopped, then its resources are closed."""
    async with opened(settings, bus_options=bus_options, stop=stop) as rt:
        worker = await build(rt)
        await worker.start()
        try:
            yield worker
        finally:
            await worker.stop()


async def serve(build: Build[W], process: str, settings: Settings | None = None, *,
                stop: asyncio.Event | None = None) -> None:
    """Run one worker as this process until SIGTERM/SIGINT (or ``stop``, for tests)."""
    settings = settings or load_settings()
    setup_process(settings, process)
    loop = asyncio.get_running_loop()
    signals = stop is None
    stop = stop or asyncio.Event()
    started = asyncio.Event()
    body = asyncio.create_task(_run(build, process, settings, stop, started), name=process)

    def on_stop(_: object = None) -> None:
        if not started.is_set():
            body.cancel()  # still waiting for a dependency: nothing is in flight

    stopped = asyncio.create_task(stop.wait())
    stopped.add_done_callback(on_stop)
    if signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    try:
        await body
    except (asyncio.CancelledError, Exception) as exc:
        # A stop while waiting for a dependency ends the start-up one way or the
        # other (cancelled, or the wait gave up): a clean exit either way.
        if started.is_set() or not stop.is_set():
            raise
        log.info("%s stopped before it had started (%s)", process, type(exc).__name__)
    finally:
        stopped.cancel()
        if signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        tracing.shutdown()  # the last spans leave before the process does


async def _run(build: Build[W], process: str, settings: Settings, stop: asyncio.Event,
               started: asyncio.Event) -> None:
    async with running(build, settings, stop=stop) as worker:
        started.set()
        assert worker.task is not None, "a worker's start() must create its main loop task"
        waiter = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({waiter, worker.task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        died = not stop.is_set()
        if died:
            # Leaving the context re-raises the loop's error, if it had one.
            log.error("%s: main loop ended without a stop request; exiting", process)
    if died:
        raise RuntimeError(f"{process}: main loop ended unexpectedly")


def main(build: Build[W], process: str) -> None:
    """The ``python -m workers.<name>`` entry point."""
    use_fast_event_loop()
    asyncio.run(serve(build, process))

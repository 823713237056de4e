"""The whole delivery pipeline in the test's event loop: web + relay + push.

Fault tests that kill processes run the workers as subprocesses instead
(tests/support/procs.py); everything else uses this in-process form, which
talks to the same real Postgres, Redis and Kafka.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from app.platform.settings import Settings
from tests.support.isolated import bus_options
from tests.support.servers import serve_app
from workers import push as push_worker
from workers import relay as relay_worker
from workers.push import Push
from workers.relay import Relay
from workers.runtime import running


@dataclass
class Pipeline:
    url: str
    settings: Settings
    relay: Relay
    push: Push


@contextlib.asynccontextmanager
async def run_relay(settings: Settings, **bus: object) -> AsyncIterator[Relay]:
    """The relay exactly as ``python -m workers.relay`` builds it, in this event loop."""
    async with running(relay_worker.build, settings, bus_options=bus_options(settings, **bus)
                       ) as relay:
        yield relay


@contextlib.asynccontextmanager
async def run_push(settings: Settings) -> AsyncIterator[Push]:
    """The push worker exactly as ``python -m workers.push`` builds it, in this event loop."""
    async with running(push_worker.build, settings, bus_options=bus_options(settings)
                       ) as push:
        yield push


@contextlib.asynccontextmanager
async def run_workers(settings: Settings) -> AsyncIterator[tuple[Relay, Push]]:
    async with run_relay(settings) as relay, run_push(settings) as push:
        yield relay, push


@contextlib.asynccontextmanager
async def run_pipeline(settings: Settings) -> AsyncIterator[Pipeline]:
    async with run_workers(settings) as (relay, push), serve_app(settings) as url:
        yield Pipeline(url, settings, relay, push)

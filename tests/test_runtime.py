"""workers/runtime.py: the one process model of the relay and the push worker.

The Procfile's ``outbox`` and ``push`` lines run ``python -m workers.relay`` and
``python -m workers.push``, whose ``main`` hands the module's ``build`` to
:func:`workers.runtime.serve`; served that way (against the real services of
the session) they deliver an event end to end and stop on request. The fault
and SIGTERM suites run the same Procfile commands as OS processes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from app.delivery.protocol import inbox_stream_key
from app.platform.settings import Settings
from devstack.process import free_port
from tests.support.isolated import wait_until
from tests.support.meshapi import MeshFactory
from tests.support.procs import COMMANDS
from tests.support.servers import serve_app
from workers import push, relay, runtime

REPO = Path(__file__).resolve().parents[1]


def test_the_procfile_runs_both_workers_as_modules() -> None:
    procfile = dict(line.split(": ", 1) for line in (REPO / "Procfile").read_text().splitlines()
                    if line.strip())
    assert procfile["outbox"] == "python -m workers.relay"
    assert procfile["push"] == "python -m workers.push"
    # What the fault tests and benchmarks start is what the Procfile says.
    assert COMMANDS["outbox"][1:] == ["-m", "workers.relay"]
    assert COMMANDS["push"][1:] == ["-m", "workers.push"]


@pytest.mark.parametrize(("module", "process"), [(relay, "outbox"), (push, "push")])
def test_each_entry_point_serves_its_build_through_the_runtime(
        monkeypatch: pytest.MonkeyPatch, module: Any, process: str) -> None:
    served: list[tuple[object, str]] = []

    async def fake_serve(build: Callable[..., Awaitable[Any]], name: str) -> None:
        served.append((build, name))

    monkeypatch.setattr(runtime, "serve", fake_serve)
    # main() installs uvloop's policy for the process it starts; in this test
    # process it must not outlive the test (uvloop's policy has no child watcher,
    # so later tests' asyncio subprocesses would fail).
    policy = asyncio.get_event_loop_policy()
    try:
        module.main()
    finally:
        asyncio.set_event_loop_policy(policy)
    assert served == [(module.build, process)]


async def test_served_workers_deliver_an_event_and_stop_on_request(
        iso: Settings, redis_client: aioredis.Redis) -> None:
    counters = ("agent_mesh_relay_batches_total", "agent_mesh_push_written_total")
    before = {name: _sample(name) for name in counters}
    wakeups = _wakeups()
    stop = asyncio.Event()
    processes = [asyncio.create_task(runtime.serve(relay.build, "outbox", iso, stop=stop)),
                 asyncio.create_task(runtime.serve(push.build, "push", iso, stop=stop))]
    try:
        async with serve_app(iso) as url, MeshFactory.connect(url) as mesh:
            a, b = await mesh.pair()
            await a.send(b.agent_id, "through the runtime")
            # Only the push worker writes the stream, and only what the relay published.
            await wait_until(lambda: _stream_seqs(redis_client, b.agent_id, [1, 2]),
                             "seq 1 and 2 in the push stream", 60)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*processes), 30)
    assert all(p.result() is None for p in processes)
    # The workers' own counts are exported (this process's registry holds all three).
    grown = {name: _sample(name) - before[name] for name in counters}
    assert grown["agent_mesh_relay_batches_total"] >= 1
    assert grown["agent_mesh_push_written_total"] >= 2
    assert _wakeups() > wakeups  # the web woke the relay (ADR 029: over Redis)


async def test_a_stop_while_waiting_for_the_bus_is_a_clean_exit(iso: Settings) -> None:
    """A worker started before its broker waits with backoff (counted), and a
    SIGTERM during that wait ends it at once, without an error."""
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    settings = iso.model_copy(update={"bus": "redis", "redis_url": nowhere})
    before = _reconnects("bus_start")
    stop = asyncio.Event()
    serving = asyncio.create_task(runtime.serve(relay.build, "outbox", settings, stop=stop))
    await wait_until(lambda: _reconnects("bus_start") > before, "a bus_start retry", 30)
    assert not serving.done()
    stop.set()
    assert await asyncio.wait_for(serving, 10) is None


class _DyingWorker:
    """A worker whose main loop ends by itself, as a crash would."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None
        self.stopped = False

    async def start(self) -> None:
        self.task = asyncio.create_task(asyncio.sleep(0))

    async def stop(self) -> None:
        self.stopped = True


async def test_a_main_loop_that_ends_by_itself_fails_the_process(migrated: Settings) -> None:
    worker = _DyingWorker()

    async def build(_rt: runtime.Runtime) -> _DyingWorker:
        return worker

    with pytest.raises(RuntimeError, match="main loop ended unexpectedly"):
        await asyncio.wait_for(runtime.serve(build, "dying", migrated, stop=asyncio.Event()), 10)
    assert worker.stopped  # still stopped and cleaned up on the way out


async def _stream_seqs(redis: aioredis.Redis, agent_id: str, want: list[int]) -> bool:
    entries = await redis.xrange(inbox_stream_key(agent_id))
    return [json.loads(fields[b"e"])["seq"] for _, fields in entries] == want


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def _wakeups() -> float:
    return sum(_sample("agent_mesh_relay_wakeups_total", {"via": via})
               for via in ("redis", "notify"))


def _reconnects(component: str) -> float:
    return _sample("agent_mesh_reconnects_total", {"component": component})

"""Scenario: the floor — what a lone request costs the web's libraries at the latency rate.

The latency scenario's web process spends ~1 CPU-ms per send at 200 msg/s, where
every request arrives alone. How much of that is ours? The same uvicorn serving a
bare ASGI app (bench/floor_app.py) is driven open loop at the same rate with the
same send body, four times: bare, with one Redis round trip, with one Postgres
round trip, with both. The differences are the CPU one round trip costs the
calling process (its library, the event loop, the kernel's loopback TCP), the
unit the pipeline's per-send hops are counted in (ADR 029). ``MODES`` is a 2×2
design (with/without each round trip), so each cost is measured twice.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.client import Client, HttpError, now
from bench.cpu import CpuMeter
from devstack.process import free_port

REPO = Path(__file__).resolve().parents[2]
MODES = ("bare", "redis", "postgres", "redis+postgres")
SERVICES = ("postgres", "redis")
BODY = {"to_agent_id": "b@bench", "message": {"message_id": "m-1",
                                              "parts": [{"kind": "text", "text": "x" * 64}]}}


@dataclass(frozen=True)
class FloorRun:
    mode: str
    requests: int
    server_ms: float    # CPU-ms of the server process per request
    client_ms: float
    services_ms: dict[str, float]  # CPU-ms per request of Postgres, Redis (their side of a trip)
    errors: int


async def _ready(client: Client, deadline: float) -> None:
    while True:
        try:
            await client.request("POST", "/", {}, BODY)
            return
        except (HttpError, OSError):
            if now() > deadline:
                raise
            await asyncio.sleep(0.05)  # the server is starting: nothing to await yet


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


async def one(mode: str, database_url: str, redis_url: str, meter: CpuMeter, *, rate: float,
              seconds: float) -> FloorRun:
    port = free_port()
    env = dict(os.environ, FLOOR_MODE=mode, FLOOR_DATABASE_URL=database_url,
               FLOOR_REDIS_URL=redis_url)
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "uvicorn", "bench.floor_app:app", "--host", "127.0.0.1",
        "--port", str(port), "--no-access-log", "--log-level", "warning",
        cwd=REPO, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    client = Client(f"http://127.0.0.1:{port}")
    try:
        await _ready(client, now() + 30)
        await client.prewarm(8)
        for _ in range(100):  # warm: connections, prepared statement, code paths
            await client.request("POST", "/", {}, BODY)
        proc, me = psutil.Process(server.pid), psutil.Process()
        s0, c0 = _cpu(proc), _cpu(me)
        meter.start()
        errors = 0

        async def req() -> None:
            nonlocal errors
            try:
                if (await client.request("POST", "/", {}, BODY)).status != 201:
                    errors += 1
            except HttpError:
                errors += 1

        n = math.floor(rate * seconds)
        start, tasks = now() + 0.05, []
        for i in range(n):
            delay = start + i / rate - now()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(req()))
        await asyncio.gather(*tasks)
        services = {k: 1000 * u.cpu / n for k, u in meter.stop().items() if k in SERVICES}
        return FloorRun(mode, n, 1000 * (_cpu(proc) - s0) / n, 1000 * (_cpu(me) - c0) / n,
                        services, errors)
    finally:
        client.close()
        server.terminate()
        try:
            await asyncio.wait_for(server.wait(), 10)
        except TimeoutError:
            server.kill()
            await server.wait()


async def run(database_url: str, redis_url: str, meter: CpuMeter, *, rate: float,
              seconds: float) -> dict[str, FloorRun]:
    """Every mode in turn; ``meter`` covers the services (their CPU per request is
    the other end of a round trip)."""
    return {m: await one(m, database_url, redis_url, meter, rate=rate, seconds=seconds)
            for m in MODES}

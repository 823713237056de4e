"""The floor scenario's server: the least a lone request can cost on the web's stack.

A bare ASGI app under the same uvicorn (uvloop, httptools) the web runs on: read a
JSON body with orjson, answer 201 with a small JSON document — and, by
``FLOOR_MODE``, first one Redis round trip (redis-py, hiredis), one Postgres round
trip (an asyncpg pool, a prepared statement), or both. No routing, middleware,
auth or validation: what is left is what the libraries and the kernel cost per
request and per round trip when every request arrives alone (bench/scenarios/floor.py).

Run by the bench only: ``FLOOR_MODE=redis+postgres FLOOR_DATABASE_URL=… FLOOR_REDIS_URL=…
python -m uvicorn bench.floor_app:app``.
"""

from __future__ import annotations

import os
from typing import Any

import asyncpg
import orjson
import redis.asyncio as aioredis

MODE = os.environ.get("FLOOR_MODE", "bare")
_state: dict[str, Any] = {}


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if "postgres" in MODE:
                _state["pool"] = await asyncpg.create_pool(
                    os.environ["FLOOR_DATABASE_URL"], min_size=2, max_size=4)
            if "redis" in MODE:
                _state["redis"] = aioredis.from_url(os.environ["FLOOR_REDIS_URL"])
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if "pool" in _state:
                await _state["pool"].close()
            if "redis" in _state:
                await _state["redis"].aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    doc = orjson.loads(body) if body else {}
    if "redis" in _state:
        await _state["redis"].incr("bench:floor")
    if "pool" in _state:
        async with _state["pool"].acquire() as conn:
            await conn.fetchval("SELECT $1::int + 1", len(doc))
    out = orjson.dumps({"ok": True, "fields": len(doc)})
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(out)).encode())]})
    await send({"type": "http.response.body", "body": out})

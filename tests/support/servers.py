"""Run the real ASGI app on a real socket inside the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import uvicorn

from app.main import create_app
from app.platform.settings import Settings
from devstack.process import free_port


@contextlib.asynccontextmanager
async def serve_app(settings: Settings, *, forwarded_allow_ips: str | None = None
                    ) -> AsyncIterator[str]:
    """``forwarded_allow_ips``: whose X-Forwarded-For uvicorn believes (its
    ``--forwarded-allow-ips``); ``None`` is uvicorn's default, 127.0.0.1 — the
    test client, as if behind a local proxy."""
    port = free_port()
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                            log_level="warning", lifespan="on", access_log=False,
                            proxy_headers=True, forwarded_allow_ips=forwarded_allow_ips)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("gateway did not start")
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task

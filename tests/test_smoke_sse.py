import asyncio
import json

import httpx
from httpx_sse import aconnect_sse


async def test_sse_receives_sent_events(mesh, gateway):
    a, b = await mesh.pair()
    received: list[dict] = []

    async def listen() -> None:
        async with httpx.AsyncClient(base_url=gateway, timeout=None) as client, \
                aconnect_sse(client, "GET", "/v1/mesh/inbox/stream", headers=b.headers) as source:
            async for sse in source.aiter_sse():
                if not sse.data:  # a keep-alive, as httpx-sse reports it after an id
                    continue
                received.append(json.loads(sse.data))
                if len(received) == 21:
                    return

    task = asyncio.create_task(listen())
    for i in range(20):
        await a.send(b.agent_id, f"m{i}")
    await asyncio.wait_for(task, 30)
    assert [e["seq"] for e in received] == list(range(1, 22))

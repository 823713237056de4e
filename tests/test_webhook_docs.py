"""docs/webhooks.md's receiver, run verbatim against a real delivery, so it cannot rot."""

from __future__ import annotations

import asyncio
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.api_helpers import ok
from tests.test_webhook_delivery import hooked_mesh

DOC = Path(__file__).resolve().parents[1] / "docs" / "webhooks.md"


def receiver_code() -> str:
    text = DOC.read_text()
    start, end = text.index("<!-- receiver:start -->"), text.index("<!-- receiver:end -->")
    return re.findall(r"```python\n(.*?)```", text[start:end], re.S)[0]


async def test_the_documented_receiver_verifies_and_acks(migrated, monkeypatch):
    async with hooked_mesh(migrated) as h:
        agent = await h.owner.agent("documented")
        await h.mesh.befriend(h.sender, agent)
        handled: list[dict[str, Any]] = []
        loop = asyncio.get_running_loop()
        arrived = asyncio.Event()

        server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
        url = f"http://127.0.0.1:{server.server_address[1]}/mesh"
        created = ok(await h.owner.http.put(f"/v1/agents/{agent.agent_id}/webhook",
                                            json={"url": url}, headers=h.owner.headers))
        monkeypatch.setenv("MESH_WEBHOOK_SECRET", created["secret"])
        namespace: dict[str, Any] = {"__name__": "receiver"}
        exec(compile(receiver_code(), str(DOC), "exec"), namespace)  # the doc's code, verbatim

        def handle(event: dict[str, Any]) -> None:
            handled.append(event)
            loop.call_soon_threadsafe(arrived.set)

        namespace["handle"] = handle
        server.RequestHandlerClass = namespace["Receiver"]
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            await h.send(agent, 3)
            expected = await h.inbox_ids(agent)
            while len(handled) < len(expected):
                arrived.clear()
                await asyncio.wait_for(arrived.wait(), 60)
            assert [(e["seq"], e["event_id"]) for e in handled] == expected
            state = ok(await h.owner.get(f"/v1/agents/{agent.agent_id}/webhook"))
            assert state["status"] == "ok"
        finally:
            server.shutdown()
            server.server_close()

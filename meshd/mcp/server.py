"""``mesh mcp``: the mesh as MCP tools for an LLM agent (stdio, the official ``mcp`` SDK).

The tools themselves — names, descriptions, input schemas, answers — are the
catalogue's (meshd/catalogue.py), shared with the gateway's own ``/mcp``; this
module carries them out over the SDK's :class:`MeshClient`. Every tool answers with
compact JSON. A failure comes back as a tool error whose text says what went wrong
*and what to do next* (which tool to call, whether retrying can help), because the
reader is a model, not a person.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from meshd.catalogue import (
    INSTRUCTIONS,
    event_brief,
    guidance,
    inbox_brief,
    message_brief,
    sent_brief,
    task_brief,
)
from meshd.client import MeshClient
from meshd.config import Config
from meshd.errors import MeshConnectionError, MeshError, MeshHTTPError
from meshd.mcp import teams as mcp_teams
from meshd.mcp.tool_server import Handler
from meshd.mcp.tool_server import build_server as build_tool_server

# Re-exported: the agent runtime's in-process tools shape and explain the same way.
__all__ = ["INSTRUCTIONS", "build_server", "event_brief", "explain", "message_brief", "serve_stdio",
           "task_brief"]

GetClient = Callable[[], Awaitable[MeshClient]]


def explain(e: MeshError, tool: str) -> str:
    """An error text that tells the model what to do about it."""
    if isinstance(e, MeshConnectionError):
        return (
            f"The mesh gateway is unreachable right now ({e}). Nothing was changed by this call "
            "unless it said so; retry in a little while."
        )
    if isinstance(e, MeshHTTPError):
        detail = e.detail or str(e)
        return guidance(e.status, detail, tool, retry_after=e.retry_after,
                        credentials="the API key (MESH_API_KEY)")
    return f"Mesh error: {e}"


def _explain(e: Exception, tool: str) -> str | None:
    if isinstance(e, MeshError):
        return explain(e, tool)
    if isinstance(e, ValueError):
        return f"Invalid input: {e}"
    return None


def handlers(get_client: GetClient) -> dict[str, Handler]:
    async def whoami(ctx: Any, a: dict[str, Any]) -> Any:
        return await (await get_client()).me()

    async def friends(ctx: Any, a: dict[str, Any]) -> Any:
        return await (await get_client()).friends()

    async def groups(ctx: Any, a: dict[str, Any]) -> Any:
        return {"groups": await (await get_client()).groups()}

    async def roster(ctx: Any, a: dict[str, Any]) -> Any:
        return await (await get_client()).roster(a["group_id"])

    async def card(ctx: Any, a: dict[str, Any]) -> Any:
        return await (await get_client()).card(a["agent_id"])

    async def send(ctx: Any, a: dict[str, Any]) -> Any:
        meta: dict[str, Any] = {"complexity": a["complexity"]} if a.get("complexity") else {}
        if a.get("handshake") is False:
            meta["handshake"] = False
        task = await (await get_client()).send(
            a["to_agent_id"], a["text"], data=a.get("data"), context_id=a.get("context_id"),
            metadata=meta or None)
        return sent_brief(task)

    async def reply(ctx: Any, a: dict[str, Any]) -> Any:
        m = await (await get_client()).reply(a["task_id"], a["text"], data=a.get("data"))
        return {"task_id": a["task_id"], "message_id": m.message_id, "sent": True}

    async def set_status(ctx: Any, a: dict[str, Any]) -> Any:
        out = await (await get_client()).set_status(a["task_id"], a["state"], a.get("message"))
        return {"task_id": a["task_id"], "state": out["state"]}

    async def get_task(ctx: Any, a: dict[str, Any]) -> Any:
        return task_brief(await (await get_client()).get_task(a["task_id"]))

    async def check_inbox(ctx: Any, a: dict[str, Any]) -> Any:
        client = await get_client()
        page = await client.poll_inbox(None, wait=a["wait_seconds"] or None, limit=a["limit"])
        if a["mark_read"] and page.events:
            await client.ack(page.events[-1].seq)
        return inbox_brief(page.events, a["limit"])

    return {
        "mesh_whoami": whoami,
        "mesh_list_friends": friends,
        "mesh_list_groups": groups,
        "mesh_get_roster": roster,
        "mesh_get_agent_card": card,
        "mesh_send_message": send,
        "mesh_reply": reply,
        "mesh_set_task_status": set_status,
        "mesh_get_task": get_task,
        "mesh_check_inbox": check_inbox,
        **mcp_teams.handlers(get_client),
    }


def build_server(get_client: GetClient) -> Server[Any]:
    """The MCP server with every mesh tool; ``get_client`` yields the connected SDK client."""
    return build_tool_server(handlers(get_client), _explain)


class _Lazy:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.client: MeshClient | None = None

    async def __call__(self) -> MeshClient:
        if self.client is None:
            assert self.cfg.url is not None
            self.client = MeshClient(self.cfg.url, api_key=self.cfg.api_key, token=self.cfg.token)
        return self.client


async def serve_stdio(cfg: Config) -> None:
    lazy = _Lazy(cfg.require())
    server = build_server(lazy)
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        if lazy.client is not None:
            await lazy.client.aclose()

"""The team tools of ``mesh mcp``: speak to a group, ask several agents and wait for
enough answers, read a whole conversation, find agents by skill. Their definitions
are the catalogue's (meshd/catalogue.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from meshd.catalogue import broadcast_brief, directory_brief, timeline_brief
from meshd.client import MeshClient
from meshd.mcp.tool_server import Handler

__all__ = ["handlers", "timeline_brief"]


def handlers(get_client: Callable[[], Awaitable[MeshClient]]) -> dict[str, Handler]:
    async def notify_group(ctx: Any, a: dict[str, Any]) -> Any:
        out = await (await get_client()).post_group(a["group_id"], a["text"])
        return {"group_id": a["group_id"], "message_id": out["message_id"],
                "recipients": out["recipients"]}

    async def broadcast(ctx: Any, a: dict[str, Any]) -> Any:
        out = await (await get_client()).broadcast(
            a["text"], to_agent_ids=a.get("to_agent_ids"), group_id=a.get("group_id"),
            policy=a["policy"], n=a.get("n"), timeout_seconds=a["timeout_seconds"])
        return broadcast_brief(out)

    async def timeline(ctx: Any, a: dict[str, Any]) -> Any:
        page = await (await get_client()).timeline(a["context_id"], cursor=a.get("cursor"), limit=100)
        return {"entries": [timeline_brief(e) for e in page["entries"]],
                "next_cursor": page["next_cursor"]}

    async def directory(ctx: Any, a: dict[str, Any]) -> Any:
        page = await (await get_client()).directory(a["query"], skill=a.get("skill"), limit=20)
        return directory_brief(page)

    return {
        "mesh_notify_group": notify_group,
        "mesh_broadcast": broadcast,
        "mesh_get_timeline": timeline,
        "mesh_search_directory": directory,
    }

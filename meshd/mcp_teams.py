"""The team tools of ``mesh mcp``: speak to a group, ask several agents and
wait for enough answers, read a whole conversation, find agents by skill."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from meshd.client import MeshClient
from meshd.mcp_server import MCPServer, _tool_errors
from meshd.models import parts_text


def register(server: MCPServer, get_client: Callable[[], Awaitable[MeshClient]]) -> None:
    @server.tool(
        description="Say something to a whole group you belong to: every other member gets "
        "it as a group.message in their inbox. Nobody has to answer; to ask and wait for "
        "answers, use mesh_broadcast."
    )
    @_tool_errors("mesh_notify_group")
    async def mesh_notify_group(
        group_id: Annotated[str, Field(description="Group id, from mesh_list_groups")],
        text: Annotated[str, Field(description="The message", min_length=1)],
    ) -> dict[str, Any]:
        out = await (await get_client()).post_group(group_id, text)
        return {"group_id": group_id, "message_id": out["message_id"],
                "recipients": out["recipients"]}

    @server.tool(
        description="Ask several agents the same thing at once: one task each, in one shared "
        "context. Give to_agent_ids OR group_id. You get ONE broadcast.completed event in "
        "your inbox when the policy is met (all / any / n completed), can no longer be met, "
        "or timeout_seconds pass; it lists each recipient's state and last message. Late "
        "answers still arrive on their own tasks."
    )
    @_tool_errors("mesh_broadcast")
    async def mesh_broadcast(
        text: Annotated[str, Field(description="The question or request", min_length=1)],
        to_agent_ids: Annotated[
            list[str] | None, Field(description="Recipients (agent ids), or use group_id")
        ] = None,
        group_id: Annotated[
            str | None, Field(description="Ask every other member of this group instead")
        ] = None,
        policy: Annotated[
            Literal["all", "any", "n"],
            Field(description="all: wait for everyone; any: the first completion; n: n of them"),
        ] = "all",
        n: Annotated[int | None, Field(description="With policy n: how many", ge=1)] = None,
        timeout_seconds: Annotated[
            int, Field(description="Give up waiting after this long", ge=1, le=604800)
        ] = 300,
    ) -> dict[str, Any]:
        out = await (await get_client()).broadcast(
            text, to_agent_ids=to_agent_ids, group_id=group_id, policy=policy, n=n,
            timeout_seconds=timeout_seconds)
        return {"broadcast_id": out["broadcast_id"], "context_id": out["context_id"],
                "task_ids": out["task_ids"], "status": out["status"], "n": out["n"]}

    @server.tool(
        description="A conversation (context) from the start: its tasks, messages, state "
        "changes and artifacts in order. Use it to catch up on a team thread or a "
        "broadcast's answers."
    )
    @_tool_errors("mesh_get_timeline")
    async def mesh_get_timeline(
        context_id: Annotated[str, Field(description="The context_id, from a task or event")],
        cursor: Annotated[
            str | None, Field(description="next_cursor of the previous call, to read on")
        ] = None,
    ) -> dict[str, Any]:
        page = await (await get_client()).timeline(context_id, cursor=cursor, limit=100)
        return {"entries": [timeline_brief(e) for e in page["entries"]],
                "next_cursor": page["next_cursor"]}

    @server.tool(
        description="Find agents that offer a skill or match some words (only agents their "
        "owners listed). To work with one, send it a friend request first."
    )
    @_tool_errors("mesh_search_directory")
    async def mesh_search_directory(
        query: Annotated[str, Field(description="Words to look for")] = "",
        skill: Annotated[str | None, Field(description="A skill id, name or tag")] = None,
    ) -> dict[str, Any]:
        page = await (await get_client()).directory(query, skill=skill, limit=20)
        return {"agents": [{k: a[k] for k in ("agent_id", "display_name", "description",
                                              "skills", "status")} for a in page["agents"]]}



def timeline_brief(e: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"at": e["at"], "kind": e["kind"], "task_id": e["task_id"]}
    if e["kind"] == "message":
        out |= {"from": e["message"]["sender"], "text": parts_text(e["message"]["parts"])}
    elif e["kind"] == "state":
        out |= {"state": e["state"]["to_state"], "by": e["state"]["set_by"]}
    elif e["kind"] == "task":
        out |= {"from": e["task"]["initiator"], "to": e["task"]["serving_agent"]}
    else:
        out["artifact"] = e["artifact"]
    return out

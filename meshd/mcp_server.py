"""``mesh mcp``: the mesh as MCP tools for an LLM agent (stdio, the official ``mcp`` SDK).

Every tool answers with compact JSON. A failure comes back as a tool error
whose text says what went wrong *and what to do next* (which tool to call,
whether retrying can help), because the reader is a model, not a person.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, ParamSpec, TypeVar

from pydantic import Field

from meshd.client import MeshClient
from meshd.config import Config
from meshd.errors import (
    AuthError,
    ConflictError,
    ForbiddenError,
    MeshConnectionError,
    MeshError,
    MeshHTTPError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    ValidationError,
)
from meshd.models import InboxEvent, Message, Task, parts_text
from meshd.task_states import TaskState, transitions_text

try:  # mcp >= 2
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # pragma: no cover - mcp 1.x
    from mcp.server.fastmcp import FastMCP as MCPServer  # type: ignore[no-redef]
    from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]

P = ParamSpec("P")
R = TypeVar("R")

INSTRUCTIONS = """\
You are an agent on Agent Mesh. Other agents are addressed by agent_id (name@owner).
Work arrives as tasks in your inbox: call mesh_check_inbox, read the message, do the
work, answer with mesh_reply (same task_id), and close the task with
mesh_set_task_status (working -> completed, or failed with a reason).
To ask another agent for something, mesh_send_message opens a new task; its answer
arrives later in your inbox. You can only message friends or members of a shared
group (mesh_list_friends, mesh_list_groups).
"""


def explain(e: MeshError, tool: str) -> str:
    """An error text that tells the model what to do about it."""
    if isinstance(e, MeshConnectionError):
        return (
            f"The mesh gateway is unreachable right now ({e}). Nothing was changed by this call "
            "unless it said so; retry in a little while."
        )
    detail = e.detail if isinstance(e, MeshHTTPError) and e.detail else str(e)
    if isinstance(e, AuthError):
        return (
            f"The mesh rejected this agent's credentials: {detail}. The API key (MESH_API_KEY) is "
            "wrong, revoked, or its agent was deleted; a human must fix it. Do not retry."
        )
    if isinstance(e, ForbiddenError):
        return (
            f"Not allowed: {detail}. You may only message friends or agents in a group you share; "
            "check mesh_list_friends and mesh_list_groups for whom you can reach."
        )
    if isinstance(e, NotFoundError):
        return (
            f"Not found: {detail}. Check the id: agent ids look like name@owner "
            "(see mesh_list_friends / mesh_get_roster); task ids come from mesh_check_inbox or "
            "mesh_send_message; you only see tasks you take part in."
        )
    if isinstance(e, ConflictError):
        if tool == "mesh_set_task_status":
            return (
                f"Conflict: {detail}. Call mesh_get_task to see the current state. Allowed moves: "
                f"{transitions_text()}. The serving agent sets states; either side may cancel."
            )
        if tool == "mesh_reply":
            return (
                f"Conflict: {detail}. A finished task (completed/failed/canceled/rejected) takes "
                "no more messages; open a new one with mesh_send_message (same context_id to "
                "keep the conversation together)."
            )
        return f"Conflict: {detail}."
    if isinstance(e, PayloadTooLargeError):
        return f"Too large: {detail}. Shorten the message, or send a link instead of the content."
    if isinstance(e, RateLimitedError):
        wait = f" Wait {e.retry_after:g} s, then retry." if e.retry_after else " Retry later."
        return f"Rate limited: {detail}.{wait}"
    if isinstance(e, ValidationError):
        return f"Invalid input: {detail}. Fix the argument and call again."
    if isinstance(e, MeshHTTPError) and e.status >= 500:
        return f"The mesh gateway failed ({e.status}: {detail}). Retry in a little while."
    return f"Mesh error: {detail}"


def _tool_errors(
    name: str,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    def wrap(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return await fn(*args, **kwargs)
            except MeshError as e:
                raise ToolError(explain(e, name)) from e
            except ValueError as e:
                raise ToolError(f"Invalid input: {e}") from e

        return inner

    return wrap


def message_brief(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {
        "message_id": m.message_id,
        "from": m.sender,
        "role": m.role,
        "text": m.text,
        "created_at": m.created_at,
    }
    other = [p for p in m.parts if p.get("kind") != "text"]
    if other:
        out["other_parts"] = other
    if m.receipt is not None:
        out["receipt"] = m.receipt.status
    return out


def task_brief(t: Task) -> dict[str, Any]:
    out: dict[str, Any] = {
        "task_id": t.task_id,
        "context_id": t.context_id,
        "state": t.state,
        "initiator": t.initiator,
        "serving_agent": t.serving_agent,
        "updated_at": t.updated_at,
    }
    if t.status_message:
        out["status_message"] = parts_text(t.status_message.get("parts"))
    if t.messages:
        out["messages"] = [message_brief(m) for m in t.messages]
    if t.artifacts:
        out["artifacts"] = t.artifacts
    return out


def event_brief(e: InboxEvent) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": e.seq, "type": e.type, "from": e.from_agent_id}
    if e.task_id:
        out["task_id"] = e.task_id
        out["context_id"] = e.context_id
    m = e.message
    if m is not None:
        out["text"] = m.text
        other = [p for p in m.parts if p.get("kind") != "text"]
        if other:
            out["other_parts"] = other
    p = e.payload
    if e.type == "task.status":
        out["state"] = p.get("state")
        out["previous_state"] = p.get("previous_state")
    elif e.type == "task.artifact":
        out["artifact"] = p.get("artifact")
    elif e.type.startswith("friend.") or e.type == "group.notice":
        out["details"] = p
    elif e.type == "group.message":
        out["group_id"] = p.get("group_id")
    elif e.type == "broadcast.completed":
        out["broadcast"] = p.get("broadcast")
    out["created_at"] = e.created_at
    return out


def build_server(get_client: Callable[[], Awaitable[MeshClient]]) -> MCPServer:
    """The MCP server with every mesh tool; ``get_client`` yields the connected SDK client."""
    server = MCPServer("agent-mesh", instructions=INSTRUCTIONS)

    @server.tool(description="Who you are on the mesh: your agent_id, status and inbox cursor.")
    @_tool_errors("mesh_whoami")
    async def mesh_whoami() -> dict[str, Any]:
        return await (await get_client()).me()

    @server.tool(description="Your friends (the agents you may message) and pending friend requests.")
    @_tool_errors("mesh_list_friends")
    async def mesh_list_friends() -> dict[str, Any]:
        return await (await get_client()).friends()

    @server.tool(description="The groups you belong to (you may message any member).")
    @_tool_errors("mesh_list_groups")
    async def mesh_list_groups() -> dict[str, Any]:
        return {"groups": await (await get_client()).groups()}

    @server.tool(description="The members of a group you belong to, with their roles and status.")
    @_tool_errors("mesh_get_roster")
    async def mesh_get_roster(
        group_id: Annotated[str, Field(description="Group id, from mesh_list_groups")],
    ) -> dict[str, Any]:
        return await (await get_client()).roster(group_id)

    @server.tool(
        description="Another agent's card: what it does and its skills. Use it to pick whom to ask for what."
    )
    @_tool_errors("mesh_get_agent_card")
    async def mesh_get_agent_card(
        agent_id: Annotated[str, Field(description="Agent id, name@owner")],
    ) -> dict[str, Any]:
        return await (await get_client()).card(agent_id)

    @server.tool(
        description="Ask another agent for something: opens a new task with your message. "
        "Returns the task_id; the answer arrives later in your inbox (mesh_check_inbox)."
    )
    @_tool_errors("mesh_send_message")
    async def mesh_send_message(
        to_agent_id: Annotated[str, Field(description="Recipient agent id, name@owner")],
        text: Annotated[str, Field(description="The message", min_length=1)],
        context_id: Annotated[
            str | None,
            Field(description="Optional: continue an earlier conversation (its context_id)"),
        ] = None,
        data: Annotated[
            dict[str, Any] | None,
            Field(description="Optional structured data sent along as a data part"),
        ] = None,
        complexity: Annotated[
            Literal["low", "medium", "high"] | None,
            Field(description="Optional: how complex the request is (the receiver infers it if absent)"),
        ] = None,
        handshake: Annotated[
            bool | None,
            Field(description="Optional: false lets the receiver skip confirming its understanding"),
        ] = None,
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"complexity": complexity} if complexity else {}
        if handshake is False:
            meta["handshake"] = False
        task = await (await get_client()).send(
            to_agent_id, text, data=data, context_id=context_id, metadata=meta or None
        )
        return {
            "task_id": task.task_id,
            "context_id": task.context_id,
            "state": task.state,
            "serving_agent": task.serving_agent,
            "message_id": task.message.message_id if task.message else None,
        }

    @server.tool(
        description="Answer on an existing task (yours or one sent to you): adds a message "
        "the other agent receives."
    )
    @_tool_errors("mesh_reply")
    async def mesh_reply(
        task_id: Annotated[str, Field(description="The task to answer, from mesh_check_inbox")],
        text: Annotated[str, Field(description="The message", min_length=1)],
        data: Annotated[dict[str, Any] | None, Field(description="Optional structured data part")] = None,
    ) -> dict[str, Any]:
        m = await (await get_client()).reply(task_id, text, data=data)
        return {"task_id": task_id, "message_id": m.message_id, "sent": True}

    @server.tool(
        description="Move a task to another state. As the serving agent: submitted → working "
        "when you start, working → completed when done (or failed, with a reason in message), "
        "input-required when you need an answer. Either side may cancel."
    )
    @_tool_errors("mesh_set_task_status")
    async def mesh_set_task_status(
        task_id: Annotated[str, Field(description="The task id")],
        state: Annotated[TaskState, Field(description="The new state")],
        message: Annotated[
            str | None, Field(description="Optional note sent with the change (e.g. the reason)")
        ] = None,
    ) -> dict[str, Any]:
        out = await (await get_client()).set_status(task_id, state, message)
        return {"task_id": task_id, "state": out["state"]}

    @server.tool(description="A task with its state, every message (with delivery receipts) and artifacts.")
    @_tool_errors("mesh_get_task")
    async def mesh_get_task(
        task_id: Annotated[str, Field(description="The task id")],
    ) -> dict[str, Any]:
        return task_brief(await (await get_client()).get_task(task_id))

    @server.tool(
        description="New events in your inbox, oldest first: tasks sent to you, replies, "
        "status changes, friend requests. By default they are marked read, so the next call "
        "returns only newer ones."
    )
    @_tool_errors("mesh_check_inbox")
    async def mesh_check_inbox(
        wait_seconds: Annotated[
            int, Field(description="Wait up to this long for something to arrive", ge=0, le=30)
        ] = 0,
        limit: Annotated[int, Field(description="At most this many events", ge=1, le=100)] = 20,
        mark_read: Annotated[
            bool, Field(description="Mark the returned events read (acknowledge them)")
        ] = True,
    ) -> dict[str, Any]:
        client = await get_client()
        page = await client.poll_inbox(None, wait=wait_seconds or None, limit=limit)
        if mark_read and page.events:
            await client.ack(page.events[-1].seq)
        return {
            "events": [event_brief(e) for e in page.events],
            "count": len(page.events),
            "more_may_be_waiting": len(page.events) >= limit,
        }

    # Teams: mesh_notify_group, mesh_broadcast, mesh_get_timeline,
    # mesh_search_directory.
    from meshd import mcp_teams

    mcp_teams.register(server, get_client)
    return server


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
        await server.run_stdio_async()
    finally:
        if lazy.client is not None:
            await lazy.client.aclose()

"""The mesh tools carried out in-process: each one calls the same service as its REST
route, as the agent that authenticated the MCP request, under the same rules (whom
it may reach, which tasks and contexts it sees).

The tools' names, descriptions, input schemas and answers are the catalogue's
(meshd/catalogue.py), shared with ``mesh mcp``; only the carrying-out is here.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from app.domain.schemas import BroadcastCreate, GroupMessageIn, MessageIn, StatusChange, TaskCreate
from app.platform import tracing
from app.platform.errors import Problem, validation_problem
from app.platform.unavailable import is_unavailable
from app.responses import MemberGroups
from app.services import (
    accounts,
    broadcasts,
    directory,
    group_messages,
    inbox,
    social,
    task_creation,
    tasks,
    timeline,
)
from app.services.principals import Agent
from app.store import agents as agents_store
from app.web.auth import PRINCIPAL
from app.web.inputs import check_storable, valid_id
from app.web.state import State, state
from meshd.catalogue import (
    broadcast_brief,
    directory_brief,
    guidance,
    inbox_brief,
    sent_brief,
    task_brief,
    timeline_brief,
)
from meshd.mcp.tool_server import Handler
from meshd.models import InboxEvent, Task

CREDENTIALS = "the bearer credential (the agent's API key or token, or the OAuth grant)"


def _call(ctx: Any) -> tuple[State, Agent, Request]:
    request: Request = ctx.request
    return state(request), request.scope[PRINCIPAL], request


def _out(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _parts(text: str, data: dict[str, Any] | None) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"kind": "text", "text": text}]
    if data is not None:
        parts.append({"kind": "data", "data": data})
    return parts


def _model(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """The REST body the tool's arguments make, checked as REST checks it."""
    check_storable(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_problem(exc) from exc


def explain(e: Exception, tool: str) -> str | None:
    """The tool error's text for what a service raised; None for a bug (it propagates
    and the SDK answers a JSON-RPC internal error)."""
    if isinstance(e, Problem):
        retry = e.headers.get("Retry-After")
        return guidance(e.status, e.detail, tool, retry_after=float(retry) if retry else None,
                        credentials=CREDENTIALS)
    if isinstance(e, ValidationError):
        p = validation_problem(e)
        return guidance(p.status, p.detail, tool)
    if is_unavailable(e):
        return guidance(503, "the database or another service is unreachable", tool)
    return None


async def whoami(ctx: Any, a: dict[str, Any]) -> Any:
    s, me, _ = _call(ctx)
    row = await agents_store.get(s.pool, me.agent_id)
    if row is None:
        raise Problem(401, "this agent was deleted")
    return _out(await accounts.agent_view(s.pool, row))


async def friends(ctx: Any, a: dict[str, Any]) -> Any:
    s, me, _ = _call(ctx)
    return _out(await social.list_friends(s.pool, me))


async def groups(ctx: Any, a: dict[str, Any]) -> Any:
    s, me, _ = _call(ctx)
    return _out(MemberGroups(groups=await social.agent_groups(s.pool, me)))


async def roster(ctx: Any, a: dict[str, Any]) -> Any:
    s, me, _ = _call(ctx)
    check_storable(a)
    return _out(await social.roster(s.pool, me, a["group_id"]))


async def card(ctx: Any, a: dict[str, Any]) -> Any:
    s, me, _ = _call(ctx)
    check_storable(a)
    return _out(await social.agent_card(s.pool, me, a["agent_id"]))


async def send(ctx: Any, a: dict[str, Any]) -> Any:
    s, me, _ = _call(ctx)
    meta: dict[str, Any] = {"complexity": a["complexity"]} if a.get("complexity") else {}
    if a.get("handshake") is False:
        meta["handshake"] = False
    body = {"to_agent_id": a["to_agent_id"],
            "message": {"parts": _parts(a["text"], a.get("data")), "metadata": meta or None}}
    if a.get("context_id"):
        body["context_id"] = a["context_id"]
    result, _created = await task_creation.create_task(s, me, _model(TaskCreate, body))
    return sent_brief(Task.from_json(_out(result)))


async def reply(ctx: Any, a: dict[str, Any]) -> Any:
    s, me, _ = _call(ctx)
    body = _model(MessageIn, {"parts": _parts(a["text"], a.get("data"))})
    m, _created = await tasks.append_message(s, me, a["task_id"], body)
    return {"task_id": a["task_id"], "message_id": _out(m)["message_id"], "sent": True}


async def set_status(ctx: Any, a: dict[str, Any]) -> Any:
    s, me, _ = _call(ctx)
    body: dict[str, Any] = {"state": a["state"]}
    if a.get("message"):
        body["message"] = {"parts": _parts(a["message"], None)}
    out = _out(await tasks.change_status(s, me, a["task_id"], _model(StatusChange, body)))
    return {"task_id": a["task_id"], "state": out["state"]}


async def get_task(ctx: Any, a: dict[str, Any]) -> Any:
    s, me, _ = _call(ctx)
    check_storable(a)
    return task_brief(Task.from_json(_out(await tasks.get_task(s.pool, me, a["task_id"]))))


async def check_inbox(ctx: Any, a: dict[str, Any]) -> Any:
    """No cursor lives on this side: with mark_read (the default) the call claims the
    events after the agent's acked seq and acks them at once, so two clients of one
    agent never both get an event; without it, it only looks."""
    s, me, _ = _call(ctx)
    wait, limit = float(a["wait_seconds"]), int(a["limit"])
    recheck = s.settings.longpoll_recheck_seconds
    if a["mark_read"]:
        wire = await inbox.claim(s.pool, s.hub, me, limit=limit, wait=wait, recheck=recheck,
                                 receipts=s.receipts)
        events = [json.loads(e.data) for e in wire]
    else:
        page = await inbox.read(s.pool, s.hub, me, after=None, limit=limit, wait=wait,
                                recheck=recheck, receipts=s.receipts)
        events = json.loads(page)["events"]
    return inbox_brief([InboxEvent.from_json(e) for e in events], limit)


async def notify_group(ctx: Any, a: dict[str, Any]) -> Any:
    s, me, _ = _call(ctx)
    check_storable(a)
    out = _out(await group_messages.post(s, me, a["group_id"],
                                         _model(GroupMessageIn, {"parts": _parts(a["text"], None)})))
    return {"group_id": a["group_id"], "message_id": out["message_id"], "recipients": out["recipients"]}


async def broadcast(ctx: Any, a: dict[str, Any]) -> Any:
    s, me, _ = _call(ctx)
    body: dict[str, Any] = {"message": {"parts": _parts(a["text"], None)}, "policy": a["policy"],
                            "timeout_seconds": a["timeout_seconds"]}
    for key in ("to_agent_ids", "group_id", "n"):
        if a.get(key) is not None:
            body[key] = a[key]
    out = await broadcasts.create(s, me, _model(BroadcastCreate, body))
    return broadcast_brief(_out(out))


async def get_timeline(ctx: Any, a: dict[str, Any]) -> Any:
    s, me, _ = _call(ctx)
    check_storable(a)
    context_id = valid_id("context_id", a["context_id"])
    page = _out(await timeline.agent_timeline(s.pool, me, context_id, 100, a.get("cursor")))
    return {"entries": [timeline_brief(e) for e in page["entries"]], "next_cursor": page["next_cursor"]}


async def search_directory(ctx: Any, a: dict[str, Any]) -> Any:
    s, _me, _ = _call(ctx)
    check_storable(a)
    page = await directory.search(s.pool, q=a["query"], skill=a.get("skill"), limit=20, cursor=None)
    return directory_brief(_out(page))


def _traced(name: str, handler: Handler) -> Handler:
    """A tool call as a span under the caller's ``_meta.traceparent`` (ADR 042), so
    what the call writes joins the caller's trace; no cost while tracing is off."""
    async def call(ctx: Any, a: dict[str, Any]) -> Any:
        if not tracing.enabled:
            return await handler(ctx, a)
        meta = getattr(ctx, "meta", None)
        parent = meta.get(tracing.TRACEPARENT) if isinstance(meta, dict) else None
        with tracing.span("mesh.mcp.call", traceparent=parent if isinstance(parent, str) else None,
                          attributes={"mcp.tool": name}):
            return await handler(ctx, a)
    return call


_TOOLS: dict[str, Handler] = {
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
    "mesh_notify_group": notify_group,
    "mesh_broadcast": broadcast,
    "mesh_get_timeline": get_timeline,
    "mesh_search_directory": search_directory,
}
HANDLERS: dict[str, Handler] = {name: _traced(name, h) for name, h in _TOOLS.items()}

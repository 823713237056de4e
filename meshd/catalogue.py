"""The mesh tools as MCP offers them to a model: names, descriptions, input schemas,
the server's instructions, the shapes of what the tools answer, and the guidance a
failed call gives back.

One definition for every server that offers them: ``mesh mcp`` (stdio, over the
SDK in :mod:`meshd.client`) and the gateway's ``/mcp`` (in-process, over its
services). Pure data and pure functions: no I/O, no HTTP client, no gateway code,
so both sides import it (the gateway's distribution ships ``meshd`` too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meshd.models import InboxEvent, Message, Task, parts_text
from meshd.task_states import STATES, transitions_text

INSTRUCTIONS = """\
You are an agent on Agent Mesh. Other agents are addressed by agent_id (name@owner).
Work arrives as tasks in your inbox: call mesh_check_inbox, read the message, do the
work, answer with mesh_reply (same task_id), and close the task with
mesh_set_task_status (working -> completed, or failed with a reason).
To ask another agent for something, mesh_send_message opens a new task; its answer
arrives later in your inbox. You can only message friends or members of a shared
group (mesh_list_friends, mesh_list_groups).
"""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


def _obj(props: dict[str, Any] | None = None, required: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props or {}}
    if required:
        out["required"] = list(required)
    return out


def _s(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **more}


def _opt(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional argument: absent or null both mean "not given"."""
    kind = schema["type"]
    return {**schema, "type": [kind, "null"]}


_TEXT = _s("The message", minLength=1)
_DATA = _opt({"type": "object", "description": "Optional structured data sent along as a data part"})

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("mesh_whoami", "Who you are on the mesh: your agent_id, status and inbox cursor.", _obj()),
    ToolSpec("mesh_list_friends",
             "Your friends (the agents you may message) and pending friend requests.", _obj()),
    ToolSpec("mesh_list_groups", "The groups you belong to (you may message any member).", _obj()),
    ToolSpec("mesh_get_roster", "The members of a group you belong to, with their roles and status.",
             _obj({"group_id": _s("Group id, from mesh_list_groups")}, ("group_id",))),
    ToolSpec("mesh_get_agent_card",
             "Another agent's card: what it does and its skills. Use it to pick whom to ask for what.",
             _obj({"agent_id": _s("Agent id, name@owner")}, ("agent_id",))),
    ToolSpec(
        "mesh_send_message",
        "Ask another agent for something: opens a new task with your message. "
        "Returns the task_id; the answer arrives later in your inbox (mesh_check_inbox).",
        _obj({
            "to_agent_id": _s("Recipient agent id, name@owner"),
            "text": _TEXT,
            "context_id": _opt(_s("Optional: continue an earlier conversation (its context_id)")),
            "data": _DATA,
            "complexity": {"type": ["string", "null"], "enum": ["low", "medium", "high", None],
                           "description": "Optional: how complex the request is (the receiver "
                                          "infers it if absent)"},
            "handshake": _opt({"type": "boolean", "description": "Optional: false lets the receiver "
                                                                 "skip confirming its understanding"}),
        }, ("to_agent_id", "text")),
    ),
    ToolSpec(
        "mesh_reply",
        "Answer on an existing task (yours or one sent to you): adds a message the other agent receives.",
        _obj({"task_id": _s("The task to answer, from mesh_check_inbox"), "text": _TEXT,
              "data": _DATA}, ("task_id", "text")),
    ),
    ToolSpec(
        "mesh_set_task_status",
        "Move a task to another state. As the serving agent: submitted → working "
        "when you start, working → completed when done (or failed, with a reason in message), "
        "input-required when you need an answer. Either side may cancel.",
        _obj({"task_id": _s("The task id"),
              "state": _s("The new state", enum=sorted(STATES)),
              "message": _opt(_s("Optional note sent with the change (e.g. the reason)"))},
             ("task_id", "state")),
    ),
    ToolSpec("mesh_get_task",
             "A task with its state, every message (with delivery receipts) and artifacts.",
             _obj({"task_id": _s("The task id")}, ("task_id",))),
    ToolSpec(
        "mesh_check_inbox",
        "New events in your inbox, oldest first: tasks sent to you, replies, "
        "status changes, friend requests. By default they are marked read, so the next call "
        "returns only newer ones.",
        _obj({
            "wait_seconds": {"type": "integer", "minimum": 0, "maximum": 30, "default": 0,
                             "description": "Wait up to this long for something to arrive"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20,
                      "description": "At most this many events"},
            "mark_read": {"type": "boolean", "default": True,
                          "description": "Mark the returned events read (acknowledge them)"},
        }),
    ),
    ToolSpec(
        "mesh_notify_group",
        "Say something to a whole group you belong to: every other member gets "
        "it as a group.message in their inbox. Nobody has to answer; to ask and wait for "
        "answers, use mesh_broadcast.",
        _obj({"group_id": _s("Group id, from mesh_list_groups"), "text": _TEXT}, ("group_id", "text")),
    ),
    ToolSpec(
        "mesh_broadcast",
        "Ask several agents the same thing at once: one task each, in one shared "
        "context. Give to_agent_ids OR group_id. You get ONE broadcast.completed event in "
        "your inbox when the policy is met (all / any / n completed), can no longer be met, "
        "or timeout_seconds pass; it lists each recipient's state and last message. Late "
        "answers still arrive on their own tasks.",
        _obj({
            "text": _s("The question or request", minLength=1),
            "to_agent_ids": {"type": ["array", "null"], "items": {"type": "string"},
                             "description": "Recipients (agent ids), or use group_id"},
            "group_id": _opt(_s("Ask every other member of this group instead")),
            "policy": _s("all: wait for everyone; any: the first completion; n: n of them",
                         enum=["all", "any", "n"], default="all"),
            "n": {"type": ["integer", "null"], "minimum": 1, "description": "With policy n: how many"},
            "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": 604800, "default": 300,
                                "description": "Give up waiting after this long"},
        }, ("text",)),
    ),
    ToolSpec(
        "mesh_get_timeline",
        "A conversation (context) from the start: its tasks, messages, state "
        "changes and artifacts in order. Use it to catch up on a team thread or a "
        "broadcast's answers.",
        _obj({"context_id": _s("The context_id, from a task or event"),
              "cursor": _opt(_s("next_cursor of the previous call, to read on"))}, ("context_id",)),
    ),
    ToolSpec(
        "mesh_search_directory",
        "Find agents that offer a skill or match some words (only agents their "
        "owners listed). To work with one, send it a friend request first.",
        _obj({"query": _s("Words to look for", default="", maxLength=200),
              "skill": _opt(_s("A skill id, name or tag"))}),
    ),
)

SPECS: dict[str, ToolSpec] = {t.name: t for t in TOOLS}


def arguments(name: str, given: dict[str, Any] | None) -> dict[str, Any]:
    """The call's arguments with the schema's defaults filled in and nulls dropped
    (a null optional argument means "not given")."""
    props = SPECS[name].input_schema["properties"]
    out = {k: v for k, v in (given or {}).items() if v is not None}
    for key, schema in props.items():
        if key not in out and "default" in schema:
            out[key] = schema["default"]
    return out


# --- what the tools answer ---------------------------------------------------------

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


def sent_brief(t: Task) -> dict[str, Any]:
    """What mesh_send_message answers: the new task, its first message's id."""
    return {
        "task_id": t.task_id,
        "context_id": t.context_id,
        "state": t.state,
        "serving_agent": t.serving_agent,
        "message_id": t.message.message_id if t.message else None,
    }


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


def inbox_brief(events: list[InboxEvent], limit: int) -> dict[str, Any]:
    return {
        "events": [event_brief(e) for e in events],
        "count": len(events),
        "more_may_be_waiting": len(events) >= limit,
    }


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


def broadcast_brief(out: dict[str, Any]) -> dict[str, Any]:
    return {k: out[k] for k in ("broadcast_id", "context_id", "task_ids", "status", "n")}


def directory_brief(page: dict[str, Any]) -> dict[str, Any]:
    return {"agents": [{k: a[k] for k in ("agent_id", "display_name", "description", "skills", "status")}
                       for a in page["agents"]]}


# --- what a failed call tells the model ----------------------------------------------

def guidance(status: int, detail: str, tool: str, *, retry_after: float | None = None,
             credentials: str = "its API key") -> str:
    """The text of a tool error for an HTTP-style failure ``status``: what went wrong and
    what to do next (which tool to call, whether retrying can help)."""
    if status == 401:
        return (
            f"The mesh rejected this agent's credentials: {detail}. {credentials[0].upper()}"
            f"{credentials[1:]} is wrong, revoked, or its agent was deleted; a human must fix it. "
            "Do not retry."
        )
    if status == 403:
        return (
            f"Not allowed: {detail}. You may only message friends or agents in a group you share; "
            "check mesh_list_friends and mesh_list_groups for whom you can reach."
        )
    if status == 404:
        return (
            f"Not found: {detail}. Check the id: agent ids look like name@owner "
            "(see mesh_list_friends / mesh_get_roster); task ids come from mesh_check_inbox or "
            "mesh_send_message; you only see tasks you take part in."
        )
    if status == 409:
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
    if status == 413:
        return f"Too large: {detail}. Shorten the message, or send a link instead of the content."
    if status == 429:
        wait = f" Wait {retry_after:g} s, then retry." if retry_after else " Retry later."
        return f"Rate limited: {detail}.{wait}"
    if status in (400, 415, 422):
        return f"Invalid input: {detail}. Fix the argument and call again."
    if status >= 500:
        return f"The mesh gateway failed ({status}: {detail}). Retry in a little while."
    return f"Mesh error: {detail}"

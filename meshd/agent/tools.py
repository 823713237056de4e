"""The mesh tools one run offers its model: an in-process MCP server named ``mesh``.

The model sees them as ``mcp__mesh__mesh_*``. They are built per run because a
run's writes carry ids derived from the event and the call (the n-th
``mesh_reply`` of the run for event E always has the same message id), so a run
repeated after a crash posts nothing twice: the gateway stores a message id once.
``mesh_check_inbox`` is not offered: the daemon owns the cursor.
See docs/decisions/011-agent-runtime.md for why in-process rather than ``mesh mcp``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from claude_agent_sdk import SdkMcpTool, create_sdk_mcp_server, tool
from claude_agent_sdk.types import McpSdkServerConfig

from meshd.catalogue import SPECS
from meshd.client import MeshClient
from meshd.errors import ConflictError, MeshError
from meshd.ids import derived_message_id, derived_task_id
from meshd.mcp.server import explain, task_brief
from meshd.mcp.teams import timeline_brief
from meshd.models import InboxEvent, Part, text_part
from meshd.task_states import STATES, TRANSITIONS, transitions_text

SERVER = "mesh"
# Moves the serving agent makes from `working` but not straight from `submitted`.
NEEDS_WORKING = TRANSITIONS["working"] - TRANSITIONS["submitted"]


def note_part(text: str, metadata: dict[str, Any]) -> Part:
    """A text part carrying the run's figures in its metadata."""
    return {**text_part(text), "metadata": metadata}


@dataclass
class RunContext:
    """What the tools of one run share with the runner."""

    client: MeshClient
    me: str
    event: InboxEvent
    # This attempt's id (meshd.daemon.run_reports): its messages carry it, so the console
    # pairs each message with the run that posted it.
    run_id: str
    started: float = field(default_factory=time.monotonic)
    turns: int = 0
    calls: Counter[str] = field(default_factory=Counter)
    # Task ids this run wrote a message on (a reply or a status note).
    posted_on: set[str] = field(default_factory=set)
    posted: int = 0
    # Tasks this run opened (mesh_send_message): their answers belong to this run's session.
    opened: list[str] = field(default_factory=list)
    # The policies' marks on every message this run posts (complexity, handshake).
    extra: dict[str, Any] = field(default_factory=dict)
    # Labels a reply before it is posted: (text with its label line, metadata) (policies/labels.py).
    finish_reply: Callable[[str], Awaitable[tuple[str, dict[str, Any]]]] | None = None
    # State changes the model asked for, other than `working`, held to the run's end:
    # task id → (state, note). The change then carries the run's final figures (ADR 037).
    held: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    # The run asked others (mesh_send_message, mesh_broadcast): their answers come later.
    waiting: bool = False

    def key(self, tool_name: str) -> str:
        self.calls[tool_name] += 1
        return f"{self.event.event_id}/{tool_name}/{self.calls[tool_name]}"

    def message_id(self, key: str) -> str:
        return derived_message_id(self.me, key)

    def metadata(self) -> dict[str, Any]:
        # Figures so far: a message posted mid-run cannot know the run's final cost.
        return {
            "mesh_run": {
                "runtime": "claude-agent-sdk",
                "run_id": self.run_id,
                "event_id": self.event.event_id,
                "final": False,
                "turns_so_far": self.turns,
                "elapsed_ms": int((time.monotonic() - self.started) * 1000),
            },
            **self.extra,
        }


def _ok(data: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": json.dumps(data, ensure_ascii=False, default=str)}]}


def _err(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "is_error": True}


def _schema(name: str) -> dict[str, Any]:
    """The tool's input schema: the catalogue's, as ``mesh mcp`` and the gateway's ``/mcp``
    offer it (the descriptions here are a run's own: it ends after sending)."""
    return SPECS[name].input_schema


def send_metadata(args: dict[str, Any]) -> dict[str, Any]:
    """The policy fields of a new task's first message (in metadata, not parts)."""
    out: dict[str, Any] = {}
    if args.get("complexity") in ("low", "medium", "high"):
        out["complexity"] = args["complexity"]
    if args.get("handshake") is False:
        out["handshake"] = False
    return out


def build_tools(run: RunContext) -> list[SdkMcpTool[Any]]:
    c = run.client

    async def guarded(name: str, coro: Any) -> dict[str, Any]:
        try:
            return _ok(await coro)
        except MeshError as e:
            return _err(explain(e, name))
        except ValueError as e:
            return _err(f"Invalid input: {e}")

    @tool("mesh_whoami", "Who you are on the mesh: your agent_id, description and status.",
          _schema("mesh_whoami"))
    async def whoami(args: dict[str, Any]) -> dict[str, Any]:
        return await guarded("mesh_whoami", c.me())

    @tool("mesh_list_friends", "Your friends (agents you may message) and pending requests.",
          _schema("mesh_list_friends"))
    async def friends(args: dict[str, Any]) -> dict[str, Any]:
        return await guarded("mesh_list_friends", c.friends())

    @tool("mesh_list_groups", "The groups you belong to (you may message any member).",
          _schema("mesh_list_groups"))
    async def groups(args: dict[str, Any]) -> dict[str, Any]:
        async def run_() -> Any:
            return {"groups": await c.groups()}

        return await guarded("mesh_list_groups", run_())

    @tool("mesh_get_roster", "The members of one of your groups.", _schema("mesh_get_roster"))
    async def roster(args: dict[str, Any]) -> dict[str, Any]:
        return await guarded("mesh_get_roster", c.roster(str(args.get("group_id", ""))))

    @tool("mesh_get_agent_card", "Another agent's card: what it does and its skills.",
          _schema("mesh_get_agent_card"))
    async def card(args: dict[str, Any]) -> dict[str, Any]:
        return await guarded("mesh_get_agent_card", c.card(str(args.get("agent_id", ""))))

    @tool("mesh_get_task", "A task with its state, every message and artifacts.",
          _schema("mesh_get_task"))
    async def get_task(args: dict[str, Any]) -> dict[str, Any]:
        async def run_() -> Any:
            return task_brief(await c.get_task(str(args.get("task_id", ""))))

        return await guarded("mesh_get_task", run_())

    @tool(
        "mesh_send_message",
        "Ask another agent for something: opens a new task with your message. Pass context_id to keep "
        "the conversation together. The answer arrives in a later run; end this run after sending.",
        _schema("mesh_send_message"),
    )
    async def send(args: dict[str, Any]) -> dict[str, Any]:
        key = run.key("mesh_send_message")

        async def run_() -> Any:
            task = await c.send(
                str(args.get("to_agent_id", "")),
                str(args.get("text", "")),
                data=args.get("data") if isinstance(args.get("data"), dict) else None,
                context_id=args.get("context_id") or run.event.context_id,
                task_id=derived_task_id(run.me, key),
                message_id=run.message_id(key),
                metadata={**run.metadata(), **send_metadata(args)},
            )
            run.posted += 1
            run.waiting = True
            run.opened.append(task.task_id)
            return {"task_id": task.task_id, "context_id": task.context_id, "state": task.state,
                    "serving_agent": task.serving_agent}  # fmt: skip

        return await guarded("mesh_send_message", run_())

    @tool(
        "mesh_reply",
        "Answer on an existing task: adds a message the other agent receives.",
        _schema("mesh_reply"),
    )
    async def reply(args: dict[str, Any]) -> dict[str, Any]:
        key = run.key("mesh_reply")
        task_id = str(args.get("task_id", ""))
        mid = run.message_id(key)

        async def run_() -> Any:
            text, label = str(args.get("text", "")), {}
            if run.finish_reply is not None:
                text, label = await run.finish_reply(text)
            try:
                await c.reply(
                    task_id,
                    text,
                    data=args.get("data") if isinstance(args.get("data"), dict) else None,
                    message_id=mid,
                    metadata={**run.metadata(), **label},
                )
            except ConflictError:
                # A re-run after a crash may word the reply differently: the id is
                # then stored with the first wording, which is the one that counts.
                task = await c.get_task(task_id)
                if not any(m.message_id == mid for m in task.messages):
                    raise
            run.posted += 1
            run.posted_on.add(task_id)
            return {"task_id": task_id, "message_id": mid, "sent": True}

        return await guarded("mesh_reply", run_())

    @tool(
        "mesh_set_task_status",
        "Move a task to another state. As its serving agent: working, then completed when answered, "
        "failed (with the reason in message) or input-required (with your question). Either side may "
        "cancel. A move other than working takes effect when this run ends.",
        _schema("mesh_set_task_status"),
    )
    async def set_status(args: dict[str, Any]) -> dict[str, Any]:
        key = run.key("mesh_set_task_status")
        task_id = str(args.get("task_id", ""))
        state = str(args.get("state", ""))
        note = str(args["message"]) if args.get("message") else None

        async def run_() -> Any:
            if state != "working":
                return await hold(task_id, state, note)
            parts = [note_part(note, run.metadata())] if note else None
            out = await c.set_status(task_id, state, parts=parts, message_id=run.message_id(key),
                                     metadata=run.metadata() if note else None)
            if note:
                run.posted += 1
                run.posted_on.add(task_id)
            return {"task_id": task_id, "state": out.get("state", state)}

        return await guarded("mesh_set_task_status", run_())

    async def hold(task_id: str, state: str, note: str | None) -> dict[str, Any]:
        # Checked now, so the model hears of an illegal move while it can still act on it.
        if state not in STATES:
            raise ValueError(f"unknown state '{state}'; one of {', '.join(STATES)}")
        task = await c.get_task(task_id)
        if state != "canceled" and task.serving_agent != run.me:
            raise ValueError(f"only the serving agent may set '{state}'; you may only cancel")
        via_working = state in NEEDS_WORKING and task.state in ("submitted", "input-required")
        if state not in TRANSITIONS.get(task.state, frozenset()) and not via_working:
            raise ValueError(f"cannot move task from '{task.state}' to '{state}' "
                             f"(moves: {transitions_text()})")
        run.held.pop(task_id, None)
        run.held[task_id] = (state, note)
        run.posted_on.add(task_id)
        if note:
            run.posted += 1
        return {"task_id": task_id, "state": state, "applied": "when this run ends"}

    # Teams. A group post and a broadcast carry no id the gateway could
    # recognise a repeat by, so a run repeated after a crash may post them twice.
    @tool("mesh_notify_group", "Post to one of your groups: every other member gets it.",
          _schema("mesh_notify_group"))
    async def notify_group(args: dict[str, Any]) -> dict[str, Any]:
        async def run_() -> Any:
            out = await c.post_group(str(args.get("group_id", "")), str(args.get("text", "")))
            run.posted += 1
            return {"message_id": out["message_id"], "recipients": out["recipients"]}

        return await guarded("mesh_notify_group", run_())

    @tool(
        "mesh_broadcast",
        "Ask several agents the same thing (to_agent_ids, or group_id for every other member): "
        "one task each in one context. One broadcast.completed wakes you later when the policy "
        "(all / any / n completed) is met, cannot be met, or timeout_seconds pass; end this run.",
        _schema("mesh_broadcast"),
    )
    async def broadcast(args: dict[str, Any]) -> dict[str, Any]:
        async def run_() -> Any:
            to = args.get("to_agent_ids")
            out = await c.broadcast(
                str(args.get("text", "")), to_agent_ids=[str(a) for a in to] if to else None,
                group_id=args.get("group_id") or None, policy=str(args.get("policy") or "all"),
                n=args.get("n"), timeout_seconds=int(args.get("timeout_seconds") or 300))
            run.posted += 1
            run.waiting = True
            return {k: out[k] for k in ("broadcast_id", "context_id", "task_ids", "status", "n")}

        return await guarded("mesh_broadcast", run_())

    @tool("mesh_get_timeline", "A conversation (context) from the start: tasks, messages, "
          "state changes, artifacts in order.", _schema("mesh_get_timeline"))
    async def timeline(args: dict[str, Any]) -> dict[str, Any]:
        async def run_() -> Any:
            page = await c.timeline(str(args.get("context_id", "")),
                                    cursor=args.get("cursor") or None, limit=100)
            return {"entries": [timeline_brief(e) for e in page["entries"]],
                    "next_cursor": page["next_cursor"]}

        return await guarded("mesh_get_timeline", run_())

    @tool("mesh_search_directory", "Find listed agents by words and skill (befriend one before "
          "messaging it).", _schema("mesh_search_directory"))
    async def directory(args: dict[str, Any]) -> dict[str, Any]:
        async def run_() -> Any:
            page = await c.directory(str(args.get("query") or ""),
                                     skill=args.get("skill") or None, limit=20)
            return {"agents": [{k: a[k] for k in ("agent_id", "display_name", "description",
                                                  "skills")} for a in page["agents"]]}

        return await guarded("mesh_search_directory", run_())

    return [whoami, friends, groups, roster, card, get_task, send, reply, set_status,
            notify_group, broadcast, timeline, directory]


def mesh_server(run: RunContext) -> tuple[McpSdkServerConfig, list[str]]:
    """The server for one run, and the names to pre-approve (``mcp__mesh__…``)."""
    tools = build_tools(run)
    return create_sdk_mcp_server(SERVER, tools=tools), [f"mcp__{SERVER}__{t.name}" for t in tools]

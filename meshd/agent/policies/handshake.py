"""The semantic handshake for medium and high tasks (enforced, not only prompted).

The first run of such a task (its ``task.created``) is a *handshake run*: the
model is told to reply with its understanding (scope, approach, assumptions,
open questions), and a PreToolUse hook lets it only read: the file tools that
read, the mesh tools that read, ``mesh_reply`` and ``mesh_set_task_status`` to
``input-required``. Whatever else it tries is denied. After the run the runtime
sets the task ``input-required`` itself if the model did not, so the order holds
whatever the model did. The sender's next message on the task is its
confirmation; the run it starts has every tool.

Messages of a handshake run carry ``metadata.mesh_policy.handshake =
"understanding"``; the sender's runtime recognises it and tells its model to
confirm or correct (:func:`sender_note`). A sender waives the handshake with
``metadata.handshake = false`` unless ``mesh agent --handshake always``.
"""

from __future__ import annotations

import logging
from typing import Any

from claude_agent_sdk import HookMatcher
from claude_agent_sdk.types import HookEvent

from meshd.agent.permissions import deny
from meshd.agent.policies.config import PolicyConfig
from meshd.agent.policies.metrics import PolicyMetrics
from meshd.models import InboxEvent, Task

log = logging.getLogger("meshd.agent")

MARK = "understanding"
READ_TOOLS = frozenset({"Read", "Glob", "Grep", "LS", "ToolSearch"})
MESH_READ = frozenset(
    f"mcp__mesh__{n}"
    for n in ("mesh_whoami", "mesh_list_friends", "mesh_list_groups", "mesh_get_roster",
              "mesh_get_agent_card", "mesh_get_task", "mesh_reply")
)  # fmt: skip
STATUS_TOOL = "mcp__mesh__mesh_set_task_status"

PROMPT = """\
This is a {level}-complexity task. Before doing any of it, confirm your understanding
(semantic handshake). In this run you may only read; the runtime denies every other tool.
Reply once with mcp__mesh__mesh_reply(task_id="{task_id}") in this form:
  Scope: ...
  Approach: ...
  Assumptions: ...
  Open questions: ...
Then end the run. The runtime sets the task input-required; the work starts when
{sender} confirms (or corrects) in its next message on the task."""

CONFIRMED = """\
{sender} answered your handshake (your understanding of the task, earlier on this task):
the new message is its confirmation or correction. Now do the work, following it."""

SENDER = """\
This message is {server}'s handshake: its understanding of what you asked, before it
starts. Answer it with mcp__mesh__mesh_reply(task_id="{task_id}"): confirm it (say what
is right) or correct it; answer its open questions. It does nothing until you answer."""


def waived(event: InboxEvent, task: Task | None, config: PolicyConfig) -> bool:
    if config.handshake == "always":
        return False
    first = task.messages[0] if task is not None and task.messages else event.message
    meta = (first.metadata if first else None) or {}
    return isinstance(meta, dict) and meta.get("handshake") is False


def needed(event: InboxEvent, task: Task | None, me: str, level: str, config: PolicyConfig) -> bool:
    """Whether this run is the handshake run of a task we serve."""
    if config.handshake == "off" or level == "low" or task is None or task.serving_agent != me:
        return False
    return event.type == "task.created" and not waived(event, task, config)


def _marked(meta: object) -> bool:
    policy = meta.get("mesh_policy") if isinstance(meta, dict) else None
    return isinstance(policy, dict) and policy.get("handshake") == MARK


def is_handshake(event: InboxEvent) -> bool:
    return _marked(event.message.metadata if event.message else None)


def confirms(event: InboxEvent, task: Task | None, me: str) -> bool:
    """Whether ``event`` answers a handshake of ours: a message on our task in input-required."""
    return (
        task is not None and task.serving_agent == me and event.type == "task.message"
        and task.state == "input-required"
        # Only our own marks count: the other side could put one in its own messages.
        and any(m.sender == me and _marked(m.metadata) for m in task.messages)
    )  # fmt: skip


def prompt(level: str, task: Task, sender: str) -> str:
    return PROMPT.format(level=level, task_id=task.task_id, sender=sender)


def confirmed_note(sender: str) -> str:
    return CONFIRMED.format(sender=sender)


def sender_note(task: Task) -> str:
    return SENDER.format(server=task.serving_agent, task_id=task.task_id)


def read_only(metrics: PolicyMetrics) -> dict[HookEvent, list[HookMatcher]]:
    """The PreToolUse hook of a handshake run: reading, the reply and input-required only."""

    async def hook(data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        name = str(data.get("tool_name", ""))
        args = data.get("tool_input") or {}
        if name in READ_TOOLS or name in MESH_READ:
            return {}
        if name == STATUS_TOOL and args.get("state") == "input-required":
            return {}
        metrics.inc("handshake_denied", name)
        return deny(
            f"{name} denied: this run is the handshake of a task; reply with your understanding "
            "first. The work starts after the sender confirms."
        )

    return {"PreToolUse": [HookMatcher(hooks=[hook])]}


def meta() -> dict[str, Any]:
    return {"mesh_policy": {"handshake": MARK}}

"""Response bodies: teams."""

from __future__ import annotations

from typing import Literal

from app.domain.task_states import TaskState
from app.responses.accounts import AgentSummary
from app.responses.base import Json, Out, Parts, Timestamp
from app.responses.tasks import ArtifactOut, MessageOut, TaskOut


class GroupMessageOut(Out):
    group_id: str
    message_id: str
    sender: str
    parts: Parts
    metadata: Json | None
    recipients: int
    created_at: Timestamp


class BroadcastRecipient(Out):
    agent_id: str
    task_id: str
    state: TaskState
    last_message: Json | None
    timed_out: bool


class BroadcastOut(Out):
    broadcast_id: str
    context_id: str
    sender: str
    group_id: str | None
    policy: Literal["all", "any", "n"]
    n: int
    deadline: Timestamp
    status: Literal["open", "met", "unmet", "timeout"]
    completed_at: Timestamp | None
    created_at: Timestamp
    task_ids: list[str]
    completed: int
    recipients: list[BroadcastRecipient]


class StateChangeOut(Out):
    from_state: TaskState
    to_state: TaskState
    set_by: str | None
    status_message: Json | None


class TimelineEntry(Out):
    """One thing that happened in a context; exactly the field its ``kind`` names is set."""
    kind: Literal["task", "message", "state", "artifact"]
    at: Timestamp
    task_id: str
    task: TaskOut | None = None
    message: MessageOut | None = None
    state: StateChangeOut | None = None
    artifact: ArtifactOut | None = None


class ContextTimeline(Out):
    context_id: str
    entries: list[TimelineEntry]
    next_cursor: str | None


class DirectoryEntry(AgentSummary):
    rank: float


class DirectoryPage(Out):
    agents: list[DirectoryEntry]
    next_cursor: str | None


# The owner's timeline of a context (GET /v1/contexts/...): the same entries.
class TimelineMessage(MessageOut):
    seq: int | None
    task_state: TaskState


class Timeline(Out):
    context_id: str
    messages: list[TimelineMessage]
    tasks: list[str]
    truncated: bool
    # The same entries the agent-side timeline pages through.
    entries: list[TimelineEntry]
    next_cursor: str | None

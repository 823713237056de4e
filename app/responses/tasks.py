"""Response bodies: tasks."""

from __future__ import annotations

from typing import Literal

from app.domain.task_states import TaskState
from app.responses.base import Json, Out, Parts, Timestamp
from app.responses.runs import TaskUsage


class TaskOut(Out):
    task_id: str
    context_id: str
    state: TaskState
    initiator: str
    serving_agent: str
    status_message: Json | None
    created_at: Timestamp
    updated_at: Timestamp


class MessageOut(Out):
    message_id: str
    task_id: str
    context_id: str
    role: Literal["user", "agent"]
    sender: str
    recipient: str
    parts: Parts
    metadata: Json | None
    created_at: Timestamp


class TaskWithMessage(TaskOut):
    """A created task with its first message (also the answer to a replayed create)."""
    message: MessageOut


class Receipt(Out):
    status: Literal["queued", "delivered", "acked"]
    delivered_at: Timestamp | None


class TaskMessage(MessageOut):
    seq: int | None
    receipt: Receipt


class ArtifactOut(Out):
    artifact_id: str
    task_id: str
    name: str | None
    description: str | None
    parts: Parts
    metadata: Json | None
    created_by: str
    created_at: Timestamp


class TaskDetail(TaskOut):
    messages: list[TaskMessage]
    artifacts: list[ArtifactOut]
    # The runs behind the task by the caller's owner's agents: their count,
    # turns and cost. Each owner sees their own agents' spend only.
    usage: TaskUsage


class TaskPage(Out):
    tasks: list[TaskOut]
    next_cursor: str | None

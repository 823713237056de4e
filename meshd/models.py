"""The gateway's JSON as pydantic models: one schema, parsed once.

Each model also keeps the exact JSON it was parsed from in ``raw``, so a field
the gateway adds later is never lost to a caller (``--json`` output, the event
an ``--exec`` handler reads on stdin) and nothing is re-encoded on the way.
Parts stay plain dicts: the gateway validated them, and handlers build them too.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ModelWrapValidatorHandler, PrivateAttr, model_validator

from meshd.task_states import TERMINAL, TaskState

Part = dict[str, Any]


def text_part(text: str) -> Part:
    return {"kind": "text", "text": text}


def data_part(data: dict[str, Any]) -> Part:
    return {"kind": "data", "data": data}


def parts_text(parts: list[Part] | None) -> str:
    """The text parts joined by newlines (data and file parts are left out)."""
    return "\n".join(str(p.get("text", "")) for p in parts or () if p.get("kind") == "text")


class WireModel(BaseModel):
    """A gateway response body; unknown fields are ignored here and kept in ``raw``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_raw(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        obj = handler(data)
        if isinstance(data, dict):
            obj._raw = data
        return obj

    @property
    def raw(self) -> dict[str, Any]:
        """The JSON object exactly as the gateway sent it."""
        return self._raw

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        """``model_validate`` under the name the SDK has always used."""
        return cls.model_validate(data)


class TokenInfo(WireModel):
    """``POST /v1/auth/token``."""

    access_token: str
    token_type: str = "bearer"
    expires_in: float = 0.0
    agent_id: str | None = None


class Receipt(WireModel):
    status: str
    delivered_at: str | None = None


class Message(WireModel):
    """A task message; the one in an inbox event's payload may omit the task fields."""

    message_id: str
    parts: list[Part]
    task_id: str | None = None
    context_id: str | None = None
    role: str | None = None
    sender: str | None = None
    recipient: str | None = None
    metadata: dict[str, Any] | None = None
    created_at: str | None = None
    # Only in GET /v1/mesh/tasks/{id}: whether the recipient's daemon got and acked it.
    receipt: Receipt | None = None

    @property
    def text(self) -> str:
        return parts_text(self.parts)


class Task(WireModel):
    task_id: str
    context_id: str
    state: TaskState
    initiator: str
    serving_agent: str
    created_at: str
    updated_at: str
    # The message sent with the last status change, or the timeout's reason.
    status_message: dict[str, Any] | None = None
    # GET /v1/mesh/tasks/{id} carries these two ...
    messages: list[Message] = []
    artifacts: list[dict[str, Any]] = []
    # ... and POST /v1/mesh/tasks the first message.
    message: Message | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


class TaskPage(WireModel):
    """``GET /v1/mesh/tasks``: newest first; ``next_cursor`` is None on the last page."""

    tasks: list[Task]
    next_cursor: str | None = None


class InboxEvent(WireModel):
    seq: int
    event_id: str
    type: str
    created_at: str
    payload: dict[str, Any]
    task_id: str | None = None
    context_id: str | None = None
    from_agent_id: str | None = None
    # The message's trace (W3C), when the gateway traces.
    traceparent: str | None = None

    @property
    def message(self) -> Message | None:
        """The message this event carries (``task.created``, ``task.message``, or a status note)."""
        m = self.payload.get("message")
        return Message.model_validate(m) if isinstance(m, dict) else None

    @property
    def text(self) -> str:
        m = self.message
        return m.text if m else ""

    @property
    def task(self) -> dict[str, Any] | None:
        """The task as it was after this event (``task.created``, ``task.status``, ``task.timeout``)."""
        return self.payload.get("task")


class InboxPage(WireModel):
    """``GET /v1/mesh/inbox``: ``next_after`` is the seq to read after next time."""

    events: list[InboxEvent]
    next_after: int

"""Typed views of the gateway's JSON (DESIGN §3–§4).

Each model keeps the full JSON it came from in ``raw``, so a field the gateway
adds later is never lost to a caller that needs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

TaskState = Literal[
    "submitted",
    "working",
    "input-required",
    "auth-required",
    "completed",
    "failed",
    "canceled",
    "rejected",
]
TASK_STATES: tuple[str, ...] = (
    "submitted",
    "working",
    "input-required",
    "auth-required",
    "completed",
    "failed",
    "canceled",
    "rejected",
)
TERMINAL_STATES = frozenset({"completed", "failed", "canceled", "rejected"})
# DESIGN §3: the allowed transitions (either side may cancel; the serving agent sets the rest).
TRANSITIONS: dict[str, frozenset[str]] = {
    "submitted": frozenset({"working", "canceled", "rejected"}),
    "working": frozenset({"completed", "failed", "canceled", "input-required", "auth-required"}),
    "input-required": frozenset({"working", "submitted", "canceled"}),
    "auth-required": frozenset({"submitted", "canceled"}),
}

EVENT_TYPES: tuple[str, ...] = (
    "task.created",
    "task.message",
    "task.status",
    "task.artifact",
    "task.timeout",
    "friend.request",
    "friend.accepted",
    "group.notice",
)

Part = dict[str, Any]


def text_part(text: str, metadata: dict[str, Any] | None = None) -> Part:
    part: Part = {"kind": "text", "text": text}
    if metadata:
        part["metadata"] = metadata
    return part


def data_part(data: dict[str, Any], metadata: dict[str, Any] | None = None) -> Part:
    part: Part = {"kind": "data", "data": data}
    if metadata:
        part["metadata"] = metadata
    return part


def parts_text(parts: list[Part] | None) -> str:
    """The text parts joined by newlines (data and file parts are left out)."""
    texts = [p for p in parts or () if isinstance(p, dict) and p.get("kind") == "text"]
    return "\n".join(str(p.get("text", "")) for p in texts)


@dataclass(frozen=True, slots=True)
class TokenInfo:
    access_token: str
    token_type: str
    expires_in: float
    agent_id: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TokenInfo:
        return cls(
            access_token=d["access_token"],
            token_type=d.get("token_type", "bearer"),
            expires_in=float(d.get("expires_in") or 0),
            agent_id=d.get("agent_id"),
            raw=d,
        )


@dataclass(frozen=True, slots=True)
class Message:
    message_id: str
    task_id: str | None
    context_id: str | None
    role: str | None
    parts: list[Part]
    metadata: dict[str, Any] | None
    sender: str | None
    created_at: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def text(self) -> str:
        return parts_text(self.parts)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Message:
        return cls(
            message_id=d.get("message_id", ""),
            task_id=d.get("task_id"),
            context_id=d.get("context_id"),
            role=d.get("role"),
            parts=list(d.get("parts") or []),
            metadata=d.get("metadata"),
            sender=d.get("sender"),
            created_at=d.get("created_at"),
            raw=d,
        )


@dataclass(frozen=True, slots=True)
class Task:
    task_id: str
    context_id: str
    state: str
    initiator: str | None
    serving_agent: str | None
    created_at: str | None
    updated_at: str | None
    messages: list[Message]
    artifacts: list[dict[str, Any]]
    status_message: dict[str, Any] | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Task:
        return cls(
            task_id=d["task_id"],
            context_id=d.get("context_id", ""),
            state=d.get("state", ""),
            initiator=d.get("initiator"),
            serving_agent=d.get("serving_agent"),
            created_at=d.get("created_at"),
            updated_at=d.get("updated_at"),
            messages=[Message.from_json(m) for m in d.get("messages") or []],
            artifacts=list(d.get("artifacts") or []),
            status_message=d.get("status_message"),
            raw=d,
        )


@dataclass(frozen=True, slots=True)
class InboxEvent:
    seq: int
    event_id: str
    type: str
    task_id: str | None
    context_id: str | None
    from_agent_id: str | None
    created_at: str | None
    payload: dict[str, Any]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def message(self) -> Message | None:
        """The message this event carries (``task.created``, ``task.message``, or a status note)."""
        m = self.payload.get("message")
        return Message.from_json(m) if isinstance(m, dict) else None

    @property
    def text(self) -> str:
        m = self.message
        return m.text if m else ""

    @property
    def task(self) -> dict[str, Any] | None:
        t = self.payload.get("task")
        return t if isinstance(t, dict) else None

    def to_json(self) -> dict[str, Any]:
        return self.raw

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> InboxEvent:
        return cls(
            seq=int(d["seq"]),
            event_id=str(d.get("event_id") or f"seq-{d['seq']}"),
            type=d.get("type", ""),
            task_id=d.get("task_id"),
            context_id=d.get("context_id"),
            from_agent_id=d.get("from_agent_id"),
            created_at=d.get("created_at"),
            payload=d.get("payload") or {},
            raw=d,
        )


@dataclass(frozen=True, slots=True)
class InboxPage:
    events: list[InboxEvent]
    next_after: int

    @classmethod
    def from_json(cls, d: dict[str, Any], after: int | None) -> InboxPage:
        events = [InboxEvent.from_json(e) for e in d.get("events") or []]
        next_after = d.get("next_after")
        if next_after is None:
            next_after = events[-1].seq if events else (after or 0)
        return cls(events=events, next_after=int(next_after))

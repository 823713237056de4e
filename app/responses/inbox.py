"""Response bodies: inbox."""

from __future__ import annotations

from app.responses.base import Json, Out, Timestamp

# An event's bytes are written by app.domain.event_wire alone (one form on every path);
# this model only documents that form in /openapi.json.

class InboxEvent(Out):
    seq: int
    event_id: str
    type: str
    task_id: str | None
    context_id: str | None
    from_agent_id: str | None
    created_at: Timestamp
    payload: Json


class InboxPage(Out):
    events: list[InboxEvent]
    next_after: int


class Acked(Out):
    acked_seq: int
    inbox_seq: int


class Claimed(Out):
    seq: int
    claimed: bool
    # When claimed: the last seq the claim covers (``seq`` … ``through`` are this
    # runtime's to handle) and the seconds until it lapses unless renewed.
    through: int | None = None
    lapses_in: float | None = None

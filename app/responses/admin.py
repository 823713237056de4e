"""Response bodies: admin."""

from __future__ import annotations

from app.responses.base import Out, Timestamp


class OutboxOverview(Out):
    counts: dict[str, int]
    oldest_pending_age_seconds: float


class DeadLetterEnvelope(Out):
    seq: int | None
    event_id: str | None
    type: str | None
    task_id: str | None
    context_id: str | None
    from_agent_id: str | None


class DeadLetter(Out):
    id: int
    topic: str
    recipient: str
    attempts: int
    last_error: str | None
    created_at: Timestamp
    event: DeadLetterEnvelope
    payload_bytes: int


class DeadLetters(Out):
    dead_letters: list[DeadLetter]
    next_after_id: int | None


class RetriedOne(Out):
    retried: int
    ids: list[int]


class RetriedAll(Out):
    retried: int

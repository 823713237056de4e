"""Response bodies: agent runs and their usage (ADR 046)."""

from __future__ import annotations

from datetime import date

from app.responses.base import Out, Timestamp


class RunOut(Out):
    agent_id: str
    run_id: str
    event_id: str | None
    task_id: str | None
    context_id: str | None
    outcome: str
    turns: int
    cost_usd: float
    duration_ms: int | None
    model: str | None
    limit_hit: str | None
    exit_status: int | None
    error: str | None
    started_at: Timestamp
    ended_at: Timestamp | None


class RunPage(Out):
    runs: list[RunOut]
    next_cursor: str | None


class UsageDay(Out):
    day: date
    runs: int
    turns: int
    cost_usd: float
    failures: int
    p50_duration_ms: int | None
    p95_duration_ms: int | None


class Usage(Out):
    agent_id: str
    days: list[UsageDay]
    total_cost_usd: float
    total_runs: int


class TaskUsage(Out):
    """The runs behind a task by the caller's owner's agents."""
    runs: int
    turns: int
    cost_usd: float

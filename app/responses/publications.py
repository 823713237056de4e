"""Response bodies: publications (agents published as templates)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import field_validator

from app.responses.base import Json, Out, Timestamp


class PublicationOut(Out):
    """A publication as any signed-in owner sees it: the snapshot, the listing
    fields and the publisher's username — nothing else of the publisher's.
    ``source_agent_id`` is shown to the publisher only (null for everyone else,
    and once the agent is deleted)."""
    publication_id: str
    title: str
    summary: str
    tags: list[str]
    author: str  # the publisher's username
    display_name: str
    description: str
    skills: list[Json]
    instructions: str
    fork_count: int
    created_at: Timestamp
    mine: bool  # the caller published it (and may delete it)
    source_agent_id: str | None

    @field_validator("skills", mode="before")
    @classmethod
    def decoded(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value


class PublicationPage(Out):
    publications: list[PublicationOut]
    next_cursor: str | None

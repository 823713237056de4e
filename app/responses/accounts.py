"""Response bodies: owners, agents, keys."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import ConfigDict, field_validator

from app.responses.base import Json, Out, Timestamp


class Registered(Out):
    username: str
    is_admin: bool
    virtual_agent_id: str
    created_at: Timestamp


class OwnerToken(Out):
    access_token: str
    token_type: Literal["bearer"]
    expires_in: int


class AgentToken(OwnerToken):
    agent_id: str


class AgentSummary(Out):
    """An agent's public fields: its owner's view and its directory entry share them."""
    agent_id: str
    name: str
    display_name: str
    description: str
    skills: list[Json]
    kind: Literal["normal", "virtual-user", "a2a"]
    status: str
    last_heartbeat_at: Timestamp | None


class A2ARemoteOut(Out):
    """An agent served by an A2A server elsewhere (kind "a2a"), as its owner sees it:
    the headers' names only, never their values."""
    card_url: str
    header_names: list[str]
    card: Json  # the card's name, description, skills and whether it streams
    failures: int  # calls in a row that did not reach the remote
    last_error: str | None
    last_success_at: Timestamp | None
    next_attempt_at: Timestamp


class AgentOut(AgentSummary):
    """An agent as its owner (and the agent itself, ``GET /v1/mesh/me``) sees it."""
    # ``a2a`` is always in the body (null for other kinds): required in the schema.
    model_config = ConfigDict(extra="ignore", json_schema_serialization_defaults_required=True)
    inbox_seq: int
    acked_seq: int
    created_at: Timestamp
    updated_at: Timestamp
    instructions: str  # the agent's system prompt; owners and the agent itself only
    listed: bool  # in the directory; the owner opts in with PATCH
    forked_from: str | None  # the publication it was forked from, if any
    a2a: A2ARemoteOut | None = None  # kind "a2a" only: its remote A2A server
    daily_budget_usd: float | None = None  # no run starts once today's spend reaches it (UTC day)
    spent_today_usd: float = 0.0  # the cost of the runs reported since 00:00 UTC

    @field_validator("skills", mode="before")
    @classmethod
    def decoded(cls, value: Any) -> Any:
        # A connection without the pool's jsonb codec hands the column over as text.
        return json.loads(value) if isinstance(value, str) else value


class AgentList(Out):
    agents: list[AgentOut]


class NewKey(Out):
    key_id: str
    api_key: str
    agent_id: str
    created_at: Timestamp


class KeyInfo(Out):
    key_id: str
    created_at: Timestamp
    revoked_at: Timestamp | None
    last_used_at: Timestamp | None


class KeyList(Out):
    keys: list[KeyInfo]


class Presence(Out):
    agent_id: str
    status: str
    last_heartbeat_at: Timestamp | None


class AgentCard(Out):
    """A2A-style; there is no URL to call, the mesh is the transport."""
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    agent_id: str
    name: str
    description: str | None
    kind: str
    status: str
    last_heartbeat_at: Timestamp | None
    version: str
    capabilities: Json
    defaultInputModes: list[str]  # A2A field names
    defaultOutputModes: list[str]
    skills: list[Json]

"""Who is calling: an owner (human account) or an agent."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Owner:
    user_id: int
    username: str
    is_admin: bool
    # The token's ``exp`` (Unix time), decoded once with it; long-lived streams end then.
    expires_at: float | None = None


@dataclass(frozen=True)
class Agent:
    agent_id: str
    owner_id: int
    kind: str
    # None when an owner's login token acts as its virtual-user agent.
    key_id: str | None = None
    # The token's ``exp`` (Unix time), decoded once with it; long-lived streams end then.
    expires_at: float | None = None
    # The OAuth grant an MCP client's access token carries (ADR 040); it holds only
    # while the grant is live, so streams and waits re-check the grant, not a key.
    grant_id: str | None = None

"""What the A2A route resolved before the SDK parsed the request: the caller, the
endpoint's agent and the web state, handed to the request handler in its call
context."""

from __future__ import annotations

from dataclasses import dataclass

from a2a.server.context import ServerCallContext

from app.services.principals import Agent
from app.web.state import State

CALL_KEY = "agent-mesh.call"


@dataclass(frozen=True)
class MeshCall:
    """What the route resolved before the SDK parsed the request."""

    state: State
    me: Agent  # the authenticated caller
    target: str  # the agent of the endpoint, /a2a/{target}
    base_url: str
    resume_after: int | None  # from Last-Event-ID


def of(context: ServerCallContext) -> MeshCall:
    return context.state[CALL_KEY]  # type: ignore[no-any-return]




"""Agent cards: one per mesh agent and the gateway's catalogue (A2A v1.0 AgentCard).

The public card at the well-known path is built without looking the agent up,
so it discloses nothing (not even existence) to a caller without credentials:
it says where to call and how to authenticate. The full card — display name,
description, skills — is the *extended* card (``GetExtendedAgentCard``), given
only to a caller that may talk to the agent, as ``GET /v1/mesh/agents/{id}/card``.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from a2a.compat.v0_3.conversions import to_compat_agent_card
from a2a.types.a2a_pb2 import AgentCard
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_CURRENT
from google.protobuf.json_format import MessageToDict, ParseDict

from app.a2a.mapping import MEDIA_TYPES, RESUME_EXTENSION, SEQ_KEY

try:
    VERSION = importlib.metadata.version("agent-mesh")
except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
    VERSION = "0.0.0"
CARD_PATH = "/.well-known/agent-card.json"
# The v0.3 interface's own URL under the agent's: its card (at V03_PATH + CARD_PATH)
# is the v0.3 card, which a v0.3 client reads without sending A2A-Version.
V03_PATH = "/v0.3"
MODES = list(MEDIA_TYPES)

SECURITY_SCHEMES: dict[str, Any] = {
    "meshBearer": {"httpAuthSecurityScheme": {
        "scheme": "bearer", "bearerFormat": "JWT",
        "description": "A mesh agent's access token: POST /v1/auth/token {\"api_key\"}"}},
    "meshApiKey": {"apiKeySecurityScheme": {
        "location": "header", "name": "X-API-Key",
        "description": "A mesh agent's API key (from its owner: POST /v1/agents/{id}/keys)"}},
}
SECURITY = [{"schemes": {"meshBearer": {"list": []}}}, {"schemes": {"meshApiKey": {"list": []}}}]

RESUME = {
    "uri": RESUME_EXTENSION, "required": False,
    "description": (
        f"Every streamed event carries its per-task sequence in metadata['{SEQ_KEY}'] "
        "(the caller's durable inbox seq). SubscribeToTask — or a dropped "
        "SendStreamingMessage — resumes with the header 'Last-Event-ID: <seq>': the task "
        "snapshot first, then every later event exactly once, in order."),
}


# A2A requires at least one skill; an agent that lists none still takes tasks.
GENERIC_SKILL = {"id": "mesh-task", "name": "Take a task",
                 "description": "Send this agent a message; it becomes a durable mesh task that "
                                "waits in the agent's inbox until the agent handles it.",
                 "tags": ["mesh"]}


def agent_url(base_url: str, agent_id: str) -> str:
    return f"{base_url.rstrip('/')}/a2a/{quote(agent_id, safe='@')}"


def _card(body: dict[str, Any]) -> AgentCard:
    return ParseDict(body, AgentCard(), ignore_unknown_fields=False)


def _common(base_url: str, version: str) -> dict[str, Any]:
    return {
        "version": version,
        "provider": {"organization": "Agent Mesh", "url": base_url.rstrip("/")},
        "documentationUrl": f"{base_url.rstrip('/')}/docs",
        "capabilities": {"streaming": True, "pushNotifications": True,
                         "extendedAgentCard": True, "extensions": [RESUME]},
        "securitySchemes": SECURITY_SCHEMES,
        "securityRequirements": SECURITY,
        "defaultInputModes": MODES,
        "defaultOutputModes": MODES,
    }


def _interfaces(url: str) -> list[dict[str, Any]]:
    # JSON-RPC first: the binding mesh clients use; REST is the SDK's, under the same URL.
    return [{"url": url, "protocolBinding": "JSONRPC",
             "protocolVersion": PROTOCOL_VERSION_CURRENT},
            {"url": url, "protocolBinding": "HTTP+JSON",
             "protocolVersion": PROTOCOL_VERSION_CURRENT},
            {"url": url + V03_PATH, "protocolBinding": "JSONRPC",
             "protocolVersion": PROTOCOL_VERSION_0_3}]


def v10_json(agent_card: AgentCard) -> dict[str, Any]:
    """The card as A2A v1.0 JSON, and nothing else (the SDK's own serializer
    adds v0.3's fields beside v1.0's when a v0.3 interface is listed)."""
    return MessageToDict(agent_card)  # type: ignore[no-any-return]


def v03_json(agent_card: AgentCard) -> dict[str, Any]:
    """The card as A2A v0.3 JSON: its v0.3 interface as the main ``url``."""
    compat = to_compat_agent_card(agent_card).model_dump(mode="json", exclude_none=True)
    return compat  # type: ignore[no-any-return]


def public_card(base_url: str, agent_id: str, version: str) -> AgentCard:
    return _card({
        **_common(base_url, version),
        "name": agent_id,
        "description": f"The mesh agent {agent_id}. Authenticate as a mesh agent it may talk "
                       "to; GetExtendedAgentCard then describes it in full.",
        "supportedInterfaces": _interfaces(agent_url(base_url, agent_id)),
        "skills": [GENERIC_SKILL],
    })


def _skill(skill: Mapping[str, Any]) -> dict[str, Any]:
    out = {"id": str(skill["id"]), "name": str(skill.get("name") or skill["id"]),
           # Both required by A2A; a mesh skill may leave them out.
           "description": str(skill.get("description") or skill.get("name") or skill["id"]),
           "tags": [str(t) for t in skill.get("tags") or []] or ["mesh"]}
    if skill.get("examples"):
        out["examples"] = [str(e) for e in skill["examples"]]
    return out


def full_card(base_url: str, agent: Mapping[str, Any], version: str) -> AgentCard:
    """The extended card of a mesh agent row (its A2A-shaped skills included)."""
    return _card({
        **_common(base_url, version),
        "name": agent["display_name"] or agent["name"],
        "description": agent["description"] or f"The mesh agent {agent['agent_id']}.",
        "supportedInterfaces": _interfaces(agent_url(base_url, agent["agent_id"])),
        "skills": [_skill(s) for s in agent["skills"] or []] or [GENERIC_SKILL],
    })


def catalogue(base_url: str, version: str) -> AgentCard:
    """The gateway's card: it is not an agent itself, it says where agents are."""
    template = f"{base_url.rstrip('/')}/a2a/{{agent_id}}"
    return _card({
        **_common(base_url, version),
        "name": "Agent Mesh",
        "description": (
            "A messaging gateway for AI agents. Every mesh agent is an A2A agent at "
            f"{template} (JSON-RPC), its card at {template}{CARD_PATH}. Messages wait "
            "while the agent is offline; streams resume after a per-task sequence."),
        # A URL template, not a callable endpoint: substitute an agent_id.
        "supportedInterfaces": _interfaces(template),
        "skills": [{"id": "mesh-directory", "name": "Reach a mesh agent",
                    "description": f"Call {template} with the agent_id of a mesh agent you "
                                   "may talk to (a friend, or a member of a group you share).",
                    "tags": ["mesh", "a2a", "durable"]}],
    })

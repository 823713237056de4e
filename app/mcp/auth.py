"""Who calls ``/mcp``: ``Authorization: Bearer`` with an agent's API key, an OAuth
access token the gateway issued for one agent (app/services/oauth_tokens.py), or
any token the REST API accepts (an agent's access token; an owner's, acting as its
virtual user). A missing or refused credential is a 401 whose ``WWW-Authenticate``
names the protected-resource metadata (RFC 9728), where a client learns how to get
one."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from app.platform.errors import Problem
from app.services import oauth
from app.services.principals import Agent
from app.web import auth
from app.web.endpoint import json
from app.web.inputs import base_url

PATH = oauth.RESOURCE_PATH
METADATA_PATH = "/.well-known/oauth-protected-resource"



def metadata_url(request: Request) -> str:
    """RFC 9728 §3.1: the resource's path goes after the well-known suffix."""
    return f"{base_url(request)}{METADATA_PATH}{PATH}"


def challenge(request: Request, detail: str, *, error: str | None) -> Problem:
    params = f'resource_metadata="{metadata_url(request)}"'
    if error:  # RFC 6750 §3: a credential was sent and refused
        params = f'error="{error}", error_description="{_quoted(detail)}", {params}'
    return Problem(401, detail, headers={"WWW-Authenticate": f"Bearer {params}"})


def _quoted(text: str) -> str:
    return text.replace("\\", "").replace('"', "'")[:200]


async def authenticate(request: Request) -> Agent:
    """The agent the call acts as, set as the request's principal for the tools."""
    try:
        me = await auth.authenticate(request, "agent", keys=True, resource=base_url(request) + PATH,
                                     route=PATH)
    except Problem as p:
        if p.status != 401:
            raise
        sent = request.headers.get("authorization", "").partition(" ")[2].strip()
        # RFC 6750 §3: "invalid_token" only when a credential was sent and refused.
        raise challenge(request, p.detail if sent else
                        "send 'Authorization: Bearer <the agent's API key or token>'",
                        error="invalid_token" if sent else None) from p
    assert isinstance(me, Agent)
    return me


def resource_metadata(request: Request) -> dict[str, object]:
    """RFC 9728: the gateway is its own authorization server."""
    return {
        "resource": f"{base_url(request)}{PATH}",
        "authorization_servers": [base_url(request)],
        "scopes_supported": [oauth.SCOPE],
        "bearer_methods_supported": ["header"],
        "resource_name": "Agent Mesh",
        "resource_documentation": f"{base_url(request)}/docs",
    }


async def protected_resource(request: Request) -> Response:
    return json(resource_metadata(request))

"""Who calls ``/mcp``: ``Authorization: Bearer`` with an agent's API key, an OAuth
access token the gateway issued for one agent (app/services/oauth.py), or any token
the REST API accepts (an agent's access token; an owner's, acting as its virtual
user). A missing or refused credential is a 401 whose ``WWW-Authenticate`` names the
protected-resource metadata (RFC 9728), where a client learns how to get one."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from app import ratelimit
from app.api import deps
from app.api.auth import client_address
from app.errors import Problem
from app.services import accounts, oauth
from app.services.principals import Agent

PATH = "/mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource"
API_KEY_PREFIX = "mk_"


def base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


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
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise challenge(request, "send 'Authorization: Bearer <the agent's API key or token>'",
                        error=None)
    try:
        if token.startswith(API_KEY_PREFIX):
            return await _by_key(request, token)
        if oauth.looks_like_access_token(token):
            return await _by_grant(request, token)
        return await deps.agent(request)
    except Problem as p:
        if p.status != 401:
            raise
        raise challenge(request, p.detail, error="invalid_token") from p


async def _by_key(request: Request, api_key: str) -> Agent:
    s = deps.state(request)
    # The token exchange's look-up and failure throttle (ADR 032).
    me = await accounts.agent_by_key(s.pool, api_key, address=client_address(request),
                                     throttle=s.auth_throttle, where=" in Authorization")
    if s.ratelimiter is not None:
        await ratelimit.require(s.ratelimiter, me.agent_id, request.method, PATH)
    request.scope["mesh.principal"] = me
    return me


async def _by_grant(request: Request, token: str) -> Agent:
    s = deps.state(request)
    try:
        me = await oauth.verify(s.pool, s.settings, token, resource=base_url(request) + PATH)
    except oauth.InvalidAccessToken as exc:
        raise challenge(request, str(exc), error="invalid_token") from exc
    if s.ratelimiter is not None:
        await ratelimit.require(s.ratelimiter, me.agent_id, request.method, PATH)
    request.scope["mesh.principal"] = me
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
    return deps.json(resource_metadata(request))

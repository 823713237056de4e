"""Who is calling: the one way every edge (REST, console, A2A, MCP) learns it.

``authenticate(request, need)`` reads the credential, resolves it, takes one token
from the caller's rate-limit bucket, checks the cache epoch that bucket's script
returns, and puts the caller on the request's scope, where a second call finds it.
The credentials, by where they come from:

- ``Authorization: Bearer`` with a JWT from ``POST /v1/auth/login`` (an owner) or
  ``POST /v1/auth/token`` (an agent) — every edge;
- the same header with an agent's API key (``mk_…``) or an OAuth access token the
  gateway issued for one agent and one resource — where the edge passes ``keys`` or
  ``resource`` (the remote MCP endpoint);
- ``X-API-Key`` with an agent's API key — where the edge passes ``api_key_header``
  (A2A, whose agent cards declare that scheme);
- the console's session cookie — with ``session=True`` (the console).

``need`` says who may call: ``"agent"`` (an owner acts as its virtual-user agent,
so a human in the loop uses the agent endpoints), ``"owner"``, ``"admin"``, or
``"any"`` (whoever the credential names), or ``"on_behalf"`` (an owner acting as
its agent the route's ``{agent_id}`` names; another owner's is "not found")."""

from __future__ import annotations

import asyncio
from typing import Literal

from redis.exceptions import RedisError
from starlette.requests import Request

from app.delivery.protocol import CACHE_EPOCH_KEY
from app.platform.errors import forbidden, unauthorized
from app.services import accounts, oauth_tokens
from app.services.principals import Agent, Owner
from app.store import users as users_store
from app.web import ratelimit
from app.web import session as sessions
from app.web.inputs import check_path_params
from app.web.state import State, state

Need = Literal["agent", "owner", "admin", "any", "on_behalf"]
PRINCIPAL = "mesh.principal"  # the scope key of the authenticated caller
SESSION = "mesh.session"  # the console session the caller signed in with
API_KEY_PREFIX = "mk_"
API_KEY_HEADER = "x-api-key"


def client_address(request: Request) -> str:
    """The peer's address, for the throttles on the unauthenticated doors; behind a
    proxy, run uvicorn with ``--proxy-headers`` and ``--forwarded-allow-ips`` so this
    is the client's, not the proxy's."""
    return request.client.host if request.client else "unknown"


async def authenticate(request: Request, need: Need = "agent", *, keys: bool = False,
                       api_key_header: bool = False, resource: str | None = None,
                       session: bool = False, route: str | None = None) -> Owner | Agent:
    """The caller, as ``need`` asks; 401 without a usable credential, 403 when the
    credential names the wrong kind of caller. ``route`` names the rate-limit route
    when the request's own route template is not the one to count (a mount)."""
    if not session:
        # Every authenticated route is screened here: a NUL byte in a path id would
        # reach Postgres as a 500. The console screens its own, for an HTML page.
        check_path_params(request)
    who = request.scope.get(PRINCIPAL)
    if who is None:
        who = await _resolve(request, state(request), keys=keys, api_key_header=api_key_header,
                             resource=resource, session=session, route=route)
    return await _as_needed(request, who, need)


async def _resolve(request: Request, s: State, *, keys: bool, api_key_header: bool,
                   resource: str | None, session: bool, route: str | None) -> Owner | Agent:
    who = await _uncached(request, s, keys=keys, api_key_header=api_key_header,
                          resource=resource, session=session)
    cached = who is None
    if who is None:
        who = await accounts.resolve(s.pool, s.settings, bearer(request), cache=s.principals)
    request.scope[PRINCIPAL] = who
    # The epoch comes back with the rate-limit token every caller takes; a higher one
    # drops the caches whichever credential this request carried.
    if not s.caches_current(await _epoch(request, s, who, route)) and cached:
        # A change committed elsewhere whose notice this process has not read
        # yet: what the cache said is asked again (ADR 020).
        who = await accounts.resolve(s.pool, s.settings, bearer(request), cache=s.principals)
        request.scope[PRINCIPAL] = who
    return who


async def _uncached(request: Request, s: State, *, keys: bool, api_key_header: bool,
                    resource: str | None, session: bool) -> Owner | Agent | None:
    """The caller named by a credential read from its store on every request (API
    key, OAuth token, console session); None for a bearer JWT, which goes through
    the principal cache."""
    if api_key_header and (api_key := request.headers.get(API_KEY_HEADER)):
        return await _by_key(request, s, api_key, " in X-API-Key")
    if session:
        return await _by_session(request, s)
    token = bearer(request)
    if keys and token.startswith(API_KEY_PREFIX):
        return await _by_key(request, s, token, " in Authorization")
    if resource is not None and oauth_tokens.looks_like_access_token(token):
        try:
            return await oauth_tokens.verify(s.pool, s.settings, token, resource=resource)
        except oauth_tokens.InvalidAccessToken as exc:
            raise unauthorized(str(exc)) from exc
    return None


def bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    return token.strip()


async def _by_key(request: Request, s: State, api_key: str, where: str) -> Agent:
    # The token exchange's look-up and failure throttle (ADR 032).
    return await accounts.agent_by_key(s.pool, api_key, address=client_address(request),
                                       throttle=s.auth_throttle, where=where)


async def _by_session(request: Request, s: State) -> Owner:
    found = await sessions.load(s.redis, request.cookies.get(sessions.COOKIE),
                                s.settings.console_session_ttl_seconds)
    user = await users_store.by_id(s.pool, found.user_id) if found is not None else None
    if found is None or user is None:
        raise unauthorized("not signed in to the console")
    request.scope[SESSION] = found
    return Owner(user["user_id"], user["username"], accounts.is_admin(s.settings, user))


async def _epoch(request: Request, s: State, who: Owner | Agent, route: str | None) -> int:
    """Take the request's rate-limit token; the bucket's script returns the cache
    epoch in the same round trip. Without a limiter the epoch is read on its own:
    -1 when there is no cache to check or Redis does not answer (the notices
    still drop entries)."""
    if s.ratelimiter is not None:
        template = route or getattr(request.scope.get("route"), "path", request.url.path)
        key = who.agent_id if isinstance(who, Agent) else f"owner:{who.user_id}"
        return (await ratelimit.require(s.ratelimiter, key, request.method, template)).epoch
    if s.principals is None and s.reach is None:
        return -1
    try:
        async with asyncio.timeout(1.0):
            return int(await s.redis.get(CACHE_EPOCH_KEY) or 0)
    except (RedisError, OSError, TimeoutError, ValueError):
        return -1


async def _as_needed(request: Request, who: Owner | Agent, need: Need) -> Owner | Agent:
    if need == "any":
        return who
    if need == "agent":
        if isinstance(who, Owner):
            s = state(request)
            who = await accounts.virtual_user_of(s.pool, who, cache=s.principals)
            request.scope[PRINCIPAL] = who
        return who
    if not isinstance(who, Owner):
        raise forbidden("this endpoint needs an owner token (POST /v1/auth/login), "
                        "not an agent token")
    if need == "admin" and not who.is_admin:
        raise forbidden("admin only: this owner is not in MESH_ADMIN_USERNAMES")
    if need == "on_behalf":
        return await accounts.act_as(state(request).pool, who, request.path_params["agent_id"])
    return who

"""Owner registration and login; API key → agent token."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.api.deps import body, doc, json, state
from app.errors import Problem
from app.responses import AgentToken, OwnerToken, Registered
from app.schemas import ApiKeyBody, Credentials, LoginBody
from app.services import accounts


def client_address(request: Request) -> str:
    """The peer's address; behind a proxy, run uvicorn with ``--proxy-headers``
    and ``--forwarded-allow-ips`` so this is the client's, not the proxy's."""
    return request.client.host if request.client else "unknown"


@doc("Register an owner account (also creates its virtual-user agent human@{username})",
     body=Credentials, response=Registered, status=201, tag="owners")
async def register(request: Request) -> Response:
    s = state(request)
    address = client_address(request)
    if s.auth_throttle is not None:
        await s.auth_throttle.attempt("register", address)
    creds = await body(request, Credentials)
    return json(await accounts.register(s.pool, s.settings, creds.username, creds.password,
                                        kdf=s.kdf), 201)


@doc("Log in as an owner; returns a bearer token", body=LoginBody, response=OwnerToken,
     tag="owners")
async def login(request: Request) -> Response:
    s = state(request)
    address = client_address(request)
    throttle = s.auth_throttle
    if throttle is not None:
        await throttle.attempt("login", address)
    creds = await body(request, LoginBody)
    if throttle is not None:
        await throttle.before_login(creds.username, address)
    try:
        return json(await accounts.login(s.pool, s.settings, creds.username, creds.password,
                                         kdf=s.kdf))
    except Problem as exc:
        if exc.status == 401 and throttle is not None:
            await throttle.login_failed(creds.username, address)
        raise


@doc("Exchange an agent's API key for a short-lived bearer token", body=ApiKeyBody,
     response=AgentToken, tag="agents")
async def token(request: Request) -> Response:
    s = state(request)
    address = client_address(request)
    throttle = s.auth_throttle
    if throttle is not None:
        await throttle.attempt("token", address)
        await throttle.before_token(address)
    key = await body(request, ApiKeyBody)
    try:
        return json(await accounts.exchange_api_key(s.pool, s.settings, key.api_key))
    except Problem as exc:
        if exc.status == 401 and throttle is not None:
            await throttle.token_failed(address)
        raise


routes = [
    Route("/v1/auth/register", register, methods=["POST"]),
    Route("/v1/auth/login", login, methods=["POST"]),
    Route("/v1/auth/token", token, methods=["POST"]),
]

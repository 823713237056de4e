"""Owner registration and login; API key → agent token."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.domain.schemas import ApiKeyBody, Credentials, LoginBody
from app.responses import AgentToken, OwnerToken, Registered
from app.services import accounts
from app.web.auth import client_address
from app.web.endpoint import endpoint, json
from app.web.inputs import body
from app.web.state import state


@endpoint("Register an owner account (also creates its virtual-user agent human@{username})",
     body=Credentials, response=Registered, status=201, tag="owners")
async def register(request: Request) -> Response:
    s = state(request)
    creds = await body(request, Credentials)
    return json(await accounts.register_at(s, creds.username, creds.password,
                                           address=client_address(request),
                                           throttle=s.auth_throttle, kdf=s.kdf), 201)


@endpoint("Log in as an owner; returns a bearer token", body=LoginBody, response=OwnerToken,
     tag="owners")
async def login(request: Request) -> Response:
    s = state(request)
    creds = await body(request, LoginBody)
    return json(await accounts.login_at(s.pool, s.settings, creds.username, creds.password,
                                        address=client_address(request),
                                        throttle=s.auth_throttle, kdf=s.kdf))


@endpoint("Exchange an agent's API key for a short-lived bearer token", body=ApiKeyBody,
     response=AgentToken, tag="agents")
async def token(request: Request) -> Response:
    s = state(request)
    address = client_address(request)
    if s.auth_throttle is not None:
        # Every exchange, right or wrong: a cap on a flood from one address. The
        # failure bucket is agent_by_key's, shared with A2A's X-API-Key.
        await s.auth_throttle.attempt("token", address)
    key = await body(request, ApiKeyBody)
    return json(await accounts.exchange_api_key(s.pool, s.settings, key.api_key,
                                                address=address, throttle=s.auth_throttle))


routes = [
    Route("/v1/auth/register", register, methods=["POST"]),
    Route("/v1/auth/login", login, methods=["POST"]),
    Route("/v1/auth/token", token, methods=["POST"]),
]

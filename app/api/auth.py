"""Owner registration and login; API key → agent token."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.api.deps import body, doc, json, state
from app.responses import AgentToken, OwnerToken, Registered
from app.schemas import ApiKeyBody, Credentials, LoginBody
from app.services import accounts


@doc("Register an owner account (also creates its virtual-user agent human@{username})",
     body=Credentials, response=Registered, status=201, tag="owners")
async def register(request: Request) -> Response:
    creds = await body(request, Credentials)
    s = state(request)
    return json(await accounts.register(s.pool, s.settings, creds.username, creds.password), 201)


@doc("Log in as an owner; returns a bearer token", body=LoginBody, response=OwnerToken,
     tag="owners")
async def login(request: Request) -> Response:
    creds = await body(request, LoginBody)
    s = state(request)
    return json(await accounts.login(s.pool, s.settings, creds.username, creds.password))


@doc("Exchange an agent's API key for a short-lived bearer token", body=ApiKeyBody,
     response=AgentToken, tag="agents")
async def token(request: Request) -> Response:
    key = await body(request, ApiKeyBody)
    s = state(request)
    return json(await accounts.exchange_api_key(s.pool, s.settings, key.api_key))


routes = [
    Route("/v1/auth/register", register, methods=["POST"]),
    Route("/v1/auth/login", login, methods=["POST"]),
    Route("/v1/auth/token", token, methods=["POST"]),
]

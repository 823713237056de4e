"""What every route handler needs: the shared state, the caller, a parsed body."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg
import redis.asyncio as aioredis
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.errors import (
    Problem,
    bad_request,
    forbidden,
    parse_json_body,
    unauthorized,
    validation_problem,
)
from app.inbox_hub import InboxHub
from app.services import accounts
from app.services.principals import Agent, Owner
from app.settings import Settings

M = TypeVar("M", bound=BaseModel)


@dataclass
class State:
    settings: Settings
    pool: asyncpg.Pool
    redis: aioredis.Redis
    hub: InboxHub
    ratelimiter: Any = None


def state(request: Request) -> State:
    return request.app.state.mesh  # type: ignore[no-any-return]


async def body(request: Request, model: type[M]) -> M:
    data = parse_json_body(await request.body())
    if not isinstance(data, dict):
        raise bad_request("request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_problem(exc) from exc


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    return token.strip()


async def principal(request: Request) -> Owner | Agent:
    cached = request.scope.get("mesh.principal")
    if cached is None:
        s = state(request)
        cached = await accounts.resolve(s.pool, s.settings, _bearer(request))
        request.scope["mesh.principal"] = cached
        if s.ratelimiter is not None:
            await _rate_limit(request, s, cached)
    return cached  # type: ignore[no-any-return]


async def _rate_limit(request: Request, s: State, who: Owner | Agent) -> None:
    """One token per authenticated request, from the caller's bucket (per-route
    overrides by route template). Several web processes share the bucket in Redis."""
    from app import ratelimit

    route = request.scope.get("route")
    template = getattr(route, "path", request.url.path)
    key = who.agent_id if isinstance(who, Agent) else f"owner:{who.user_id}"
    await ratelimit.require(s.ratelimiter, key, request.method, template)


async def owner(request: Request) -> Owner:
    who = await principal(request)
    if not isinstance(who, Owner):
        raise forbidden("this endpoint needs an owner token (POST /v1/auth/login), "
                        "not an agent token")
    return who


async def admin(request: Request) -> Owner:
    who = await owner(request)
    if not who.is_admin:
        raise forbidden("admin only: this owner is not in MESH_ADMIN_USERNAMES")
    return who


async def agent(request: Request) -> Agent:
    """The calling agent. An owner token acts as the owner's virtual-user agent,
    so a human in the loop uses the same endpoints as any agent."""
    who = await principal(request)
    if isinstance(who, Owner):
        acting = await accounts.virtual_user_of(state(request).pool, who)
        request.scope["mesh.principal"] = acting
        return acting
    return who


def json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(data, status_code=status, headers=headers)


def int_query(request: Request, name: str, *, default: int | None, minimum: int = 0,
              maximum: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Problem(422, f"query parameter '{name}' must be an integer, got '{raw}'") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise Problem(422, f"query parameter '{name}' must be {bound}, got {value}")
    return value


def float_query(request: Request, name: str, *, default: float, minimum: float,
                maximum: float) -> float:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise Problem(422, f"query parameter '{name}' must be a number, got '{raw}'") from None
    if not minimum <= value <= maximum:
        raise Problem(422, f"query parameter '{name}' must be between {minimum} and {maximum}, "
                           f"got {value}")
    return value


def doc(summary: str, *, body: type[BaseModel] | None = None, auth: str | None = None,
        status: int = 200, tag: str = "mesh") -> Callable[[Any], Any]:
    """Attach OpenAPI facts to a handler; app.openapi collects them."""
    def mark(fn: Any) -> Any:
        fn.__mesh_doc__ = {"summary": summary, "body": body, "auth": auth, "status": status,
                           "tag": tag}
        return fn
    return mark

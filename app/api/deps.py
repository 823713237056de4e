"""What every route handler needs: the shared state, the caller, a parsed body."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg
import redis.asyncio as aioredis
from pydantic import BaseModel, ValidationError
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response

from app import fastjson, ratelimit
from app.delivery import CACHE_EPOCH_KEY
from app.errors import (
    Problem,
    bad_request,
    forbidden,
    parse_json_body,
    unauthorized,
    validation_problem,
)
from app.ids import is_valid_id
from app.inbox_hub import InboxHub, publish_auth_change
from app.services import accounts
from app.services.inbox import ReceiptBatcher
from app.services.inbox_stream import Recheck
from app.services.principal_cache import PrincipalCache
from app.services.principals import Agent, Owner
from app.services.reach_cache import ReachCache, publish_reach_change
from app.services.task_creates import CreateBatcher
from app.settings import Settings
from app.writes import Wakeup

M = TypeVar("M", bound=BaseModel)
BIGINT_MAX = 2**63 - 1  # seqs are Postgres bigints


@dataclass
class State:
    settings: Settings
    pool: asyncpg.Pool
    redis: aioredis.Redis
    hub: InboxHub
    ratelimiter: Any = None
    # The after-commit signal of this web process (app.after_commit.AfterCommit),
    # handed to every write's unit of work (app.writes); None makes each write
    # NOTIFY the relay itself.
    wakeup: Wakeup | None = None
    # app.auth_throttle.AuthThrottle and app.services.kdf.Kdf.
    auth_throttle: Any = None
    kdf: Any = None
    # app.stream_slots.StreamSlots: open SSE streams per agent in this process.
    sse_slots: Any = None
    # The same, per owner, for the console's live-feed streams (ADR 032).
    feed_slots: Any = None
    # The batched receipts (ADR 021).
    receipts: ReceiptBatcher | None = None  # the long-poll passes it to record_delivery
    # The one Postgres re-check timer of this process's SSE streams (ADR 023).
    sse_recheck: Recheck | None = None
    # The per-process caches of who a token names and who may reach whom,
    # kept right by the notices the hub hears; None: every request asks Postgres.
    principals: PrincipalCache | None = None
    reach: ReachCache | None = None
    # The writer that puts concurrent task creates in one statement (ADR 028).
    creates: CreateBatcher | None = None

    # The highest cache epoch this process has seen (app.delivery.CACHE_EPOCH_KEY).
    cache_epoch: int = 0

    def caches_current(self, epoch: int) -> bool:
        """Whether the caches may be trusted at ``epoch`` (read from Redis with the
        rate-limit bucket). A higher epoch than seen so far means a credential or
        reach change happened, maybe before its notice got here: both caches are
        dropped (the notice, when it comes, drops nothing more), and False."""
        if epoch <= self.cache_epoch:
            return True
        self.cache_epoch = epoch
        if self.principals is not None:
            self.principals.reset()
        if self.reach is not None:
            self.reach.reset()
        return False

    async def auth_changed(self, agent_id: str) -> None:
        """An agent's credentials changed (committed): forget them here, tell every
        web process. The ``auth_changed`` of app.services.accounts."""
        if self.reach is not None:  # a deleted agent reaches nobody any more
            self.reach.forget_all()
        if self.principals is not None:
            await self.principals.auth_changed(agent_id)
        else:
            await publish_auth_change(self.redis, agent_id)

    async def reach_changed(self) -> None:
        """Who may reach whom changed (committed): the ``reach_changed`` of
        app.services.social."""
        if self.reach is not None:
            await self.reach.changed()
        else:
            await publish_reach_change(self.redis)


def state(request: Request) -> State:
    return request.app.state.mesh  # type: ignore[no-any-return]


# Deeper JSON than this is refused before validation (no real request needs it,
# and every layer below — pydantic, the jsonb encoder, Postgres — recurses).
MAX_JSON_DEPTH = 64


def _unstorable(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which cannot be stored; remove it"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate (not valid Unicode); send valid UTF-8"
    return None


def check_storable(data: Any) -> None:
    """Refuse what Postgres cannot store — NUL characters and lone surrogates in
    text and jsonb, non-finite numbers in jsonb — with a 422 naming the field,
    instead of a 500 from the database. Iterative, so depth cannot crash it."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise bad_request(f"request body is nested too deeply (more than {MAX_JSON_DEPTH} "
                              f"levels, at '{where}')")
        items: Any = ()
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        elif isinstance(value, str):
            why = _unstorable(value)
            if why:
                _refuse(where or "body", why)
        elif isinstance(value, float) and not math.isfinite(value):
            _refuse(where or "body", "is not a finite number")
        for key, item in items:
            field = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and (why := _unstorable(key)):
                _refuse(field, f"key {why}")
            stack.append((item, field, depth + 1))


def _refuse(field: str, why: str) -> None:
    raise Problem(422, f"invalid request: {field}: {why}",
                  errors=[{"field": field, "message": why}])


def check_path_params(request: Request) -> None:
    for name, value in request.path_params.items():
        if isinstance(value, str) and (why := _unstorable(value)):
            raise Problem(422, f"path parameter '{name}' {why}")


def valid_id(name: str, value: str) -> str:
    """``value`` if it is a well-formed id (app.ids), else a 422 naming ``name``."""
    if not is_valid_id(value):
        raise Problem(422, f"{name} is not a valid id")
    return value


def check_json_content_type(request: Request) -> None:
    """415 for a body declared as something else than JSON (a form post, text);
    a request without a Content-Type is read as JSON, as curl -d sends it."""
    declared = request.headers.get("content-type")
    if declared is None:
        return
    media = declared.split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/")
                                           and media.endswith("+json")):
        raise Problem(415, f"Content-Type must be application/json, got '{declared[:100]}'; "
                           "send the body as JSON with 'Content-Type: application/json'")


async def body(request: Request, model: type[M]) -> M:
    check_json_content_type(request)
    data = parse_json_body(await request.body())
    if not isinstance(data, dict):
        raise bad_request("request body must be a JSON object")
    check_storable(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_problem(exc) from exc


def bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    return token.strip()


async def principal(request: Request) -> Owner | Agent:
    """The caller. Every route with path parameters is authenticated, so this is
    also where they are screened: a NUL byte in an id would reach Postgres as a
    500, so it is a 422 here."""
    check_path_params(request)
    cached = request.scope.get("mesh.principal")
    if cached is None:
        s = state(request)
        cached = await accounts.resolve(s.pool, s.settings, bearer(request), cache=s.principals)
        request.scope["mesh.principal"] = cached
        if s.ratelimiter is not None:  # its script reads the epoch in the same round trip
            epoch = (await _rate_limit(request, s, cached)).epoch
        else:
            epoch = await _cache_epoch(s)
        if not s.caches_current(epoch):
            # A change committed elsewhere whose notice this process has not read
            # yet: what the cache said is asked again (ADR 020).
            cached = await accounts.resolve(s.pool, s.settings, bearer(request),
                                            cache=s.principals)
            request.scope["mesh.principal"] = cached
    return cached  # type: ignore[no-any-return]


async def _cache_epoch(s: State) -> int:
    """The cache epoch, read on its own (no rate limiter runs); -1 when there is no
    cache to check or Redis does not answer (the notices still drop entries)."""
    if s.principals is None and s.reach is None:
        return -1
    try:
        async with asyncio.timeout(1.0):
            return int(await s.redis.get(CACHE_EPOCH_KEY) or 0)
    except (RedisError, OSError, TimeoutError, ValueError):
        return -1


async def _rate_limit(request: Request, s: State, who: Owner | Agent) -> ratelimit.Decision:
    """One token per authenticated request, from the caller's bucket (per-route
    overrides by route template). Several web processes share the bucket in Redis."""
    route = request.scope.get("route")
    template = getattr(route, "path", request.url.path)
    key = who.agent_id if isinstance(who, Agent) else f"owner:{who.user_id}"
    return await ratelimit.require(s.ratelimiter, key, request.method, template)


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
        s = state(request)
        acting = await accounts.virtual_user_of(s.pool, who, cache=s.principals)
        request.scope["mesh.principal"] = acting
        return acting
    return who


def json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON response; a response model (app.responses) is serialized by its own rules."""
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    return Response(fastjson.dumps(data), status_code=status, headers=headers,
                    media_type="application/json")


def int_query(request: Request, name: str, *, default: int | None, minimum: int = 0,
              maximum: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Problem(422, f"query parameter '{name}' must be an integer, got '{raw}'") from None
    maximum = BIGINT_MAX if maximum is None else maximum
    if value < minimum or value > maximum:
        bound = f"between {minimum} and {maximum}"
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


def doc(summary: str, *, body: type[BaseModel] | None = None,
        response: type[BaseModel] | None = None, media: str | None = None,
        auth: str | None = None, status: int = 200, replay_status: int | None = None,
        tag: str = "mesh", params: list[dict[str, Any]] | None = None) -> Callable[[Any], Any]:
    """Attach OpenAPI facts to a handler; app.openapi collects them.

    ``response`` is the JSON body of a success (an app.responses model); ``media``
    names a success body that is not JSON (SSE); neither, with ``status=204``,
    means no body. ``replay_status`` documents the answer to an idempotent retry
    (200 for a create that was already done), with the same body. ``params`` are
    the query parameters and headers the handler reads (:func:`query_param`,
    :func:`header_param`), as OpenAPI parameter objects."""
    def mark(fn: Any) -> Any:
        fn.__mesh_doc__ = {"summary": summary, "body": body, "response": response,
                           "media": media, "auth": auth, "status": status,
                           "replay_status": replay_status, "tag": tag,
                           "params": params or []}
        return fn
    return mark


def query_param(name: str, description: str, *, type_: str = "integer",
                minimum: float | None = 0, maximum: float | None = None,
                **schema: Any) -> dict[str, Any]:
    """An OpenAPI query parameter, with the bounds the handler enforces."""
    body: dict[str, Any] = {"type": type_, **schema}
    if type_ in ("integer", "number"):
        if minimum is not None:
            body["minimum"] = minimum
        body["maximum"] = BIGINT_MAX if maximum is None and type_ == "integer" else maximum
        if body["maximum"] is None:
            del body["maximum"]
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": body}


def header_param(name: str, description: str, **schema: Any) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": False, "description": description,
            "schema": {"type": "string", **schema}}

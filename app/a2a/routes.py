"""A2A routes: ``/a2a/{agent_id}`` (JSON-RPC, v1.0 and v0.3), its card, and the
gateway's catalogue. The route authenticates the caller and checks that it may
talk to the agent before the SDK's dispatcher parses and answers the call."""

from __future__ import annotations

import email.utils
import hashlib
import time
from collections.abc import Awaitable, Callable

from a2a.server.context import ServerCallContext
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.server.routes.rest_routes import create_rest_routes
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_CURRENT
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.a2a import card
from app.a2a.call import CALL_KEY, MeshCall
from app.a2a.handler import MeshRequestHandler
from app.platform import fastjson
from app.platform.errors import Problem
from app.services import task_creation
from app.services.principals import Agent
from app.web.auth import PRINCIPAL, authenticate
from app.web.inputs import BIGINT_MAX, check_json_content_type, check_path_params
from app.web.state import state


async def caller(request: Request) -> Agent:
    """A mesh agent, by its bearer JWT (an owner's token acts as its virtual
    user, as everywhere) or by its API key in ``X-API-Key`` — the card's schemes."""
    me = await authenticate(request, "agent", api_key_header=True, route="/a2a/{agent_id}")
    assert isinstance(me, Agent)
    return me


def _resume_after(request: Request) -> int | None:
    raw = request.headers.get("last-event-id")
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= BIGINT_MAX:
        raise Problem(400, f"Last-Event-ID must be the seq of an event (a non-negative integer, "
                           f"metadata['agent-mesh.seq']), got '{raw}'")
    return value


class MeshContextBuilder(DefaultServerCallContextBuilder):
    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[CALL_KEY] = MeshCall(
            state=state(request), me=request.scope[PRINCIPAL],
            target=request.path_params["agent_id"], base_url=str(request.base_url),
            resume_after=request.scope["mesh.a2a.resume_after"])
        return context


dispatcher = JsonRpcDispatcher(MeshRequestHandler(), context_builder=MeshContextBuilder(),
                               enable_v0_3_compat=True)


Endpoint = Callable[[Request], Awaitable[Response]]


def guarded(endpoint: Endpoint) -> Endpoint:
    """Authenticate the caller and check it may talk to the endpoint's agent —
    the endpoint is the agent: 401, 404 unknown, 403 stranger, at the door, as
    A2A's HTTP bindings say — then let the SDK answer."""
    async def guard(request: Request) -> Response:
        me = await caller(request)
        await task_creation.check_can_message(state(request), me.agent_id,
                                              request.path_params["agent_id"])
        if request.method == "POST":
            check_json_content_type(request)  # 415, as the REST API answers
        request.scope["mesh.a2a.resume_after"] = _resume_after(request)
        return await endpoint(request)
    return guard


def rest_routes() -> list[BaseRoute]:
    """The SDK's HTTP+JSON binding under the same URL (``/a2a/{id}/message:send``,
    ``/tasks/{id}``, …), each route behind the same guard. Its multi-tenant mount
    (``/{tenant}/…``) is left out: the agent_id in the path is the tenant."""
    sdk = create_rest_routes(MeshRequestHandler(), context_builder=MeshContextBuilder(),
                             enable_v0_3_compat=True, path_prefix=REST_PREFIX)
    return [Route(r.path, guarded(r.endpoint), methods=list(r.methods or ()))
            for r in sdk if isinstance(r, Route)]


REST_PREFIX = "/a2a/{agent_id}"
rpc = guarded(dispatcher.handle_requests)


# Cards change only with the code or the URL they are asked at, so a process's
# cards are as old as the process: its start is their Last-Modified.
STARTED = int(time.time())
CARD_CACHE = "public, max-age=300"


def card_version(request: Request, *, forced: str | None = None) -> str:
    """The card version a client asks for: ``forced`` (the v0.3 interface's path),
    else its A2A-Version header, else 1.0 — the well-known path is v1.0's."""
    if forced is not None:
        return forced
    raw = request.headers.get("a2a-version", "").strip()
    major_minor = ".".join(raw.split(".")[:2])
    if raw == "" or major_minor in ("1", "1.0"):
        return PROTOCOL_VERSION_CURRENT
    if major_minor == PROTOCOL_VERSION_0_3:
        return PROTOCOL_VERSION_0_3
    raise Problem(400, f"A2A-Version '{raw[:40]}' is not served here: ask for "
                       f"'{PROTOCOL_VERSION_CURRENT}' (or no header) or '{PROTOCOL_VERSION_0_3}'")


def _not_modified(request: Request, etag: str) -> bool:
    """RFC 9110 §13.1: If-None-Match (weak comparison) wins; If-Modified-Since
    counts only without it."""
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None:
        tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
        return "*" in tags or etag in tags
    since = request.headers.get("if-modified-since")
    if since is None:
        return False
    try:
        when = email.utils.parsedate_to_datetime(since)
    except (TypeError, ValueError):
        return False  # an unreadable date is ignored, as RFC 9110 says
    return when.tzinfo is not None and STARTED <= when.timestamp()


def _card_response(request: Request, agent_card: card.AgentCard, version: str) -> Response:
    body = card.v03_json(agent_card) if version == PROTOCOL_VERSION_0_3 \
        else card.v10_json(agent_card)
    content = fastjson.dumps(body)
    etag = f'"{hashlib.sha256(content).hexdigest()[:32]}"'
    headers = {"ETag": etag, "Cache-Control": CARD_CACHE, "Vary": "A2A-Version",
               "Last-Modified": email.utils.formatdate(STARTED, usegmt=True)}
    if _not_modified(request, etag):
        return Response(status_code=304, headers=headers)
    return Response(content, media_type="application/json", headers=headers)


def _agent_card(forced: str | None) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        check_path_params(request)
        version = card_version(request, forced=forced)
        return _card_response(request, card.public_card(
            str(request.base_url), request.path_params["agent_id"], card.VERSION), version)
    return endpoint


async def gateway_card(request: Request) -> Response:
    return _card_response(request, card.catalogue(str(request.base_url), card.VERSION),
                          card_version(request))


routes: list[BaseRoute] = [
    Route("/.well-known/agent-card.json", gateway_card, methods=["GET"]),
    Route(REST_PREFIX + card.CARD_PATH, _agent_card(None), methods=["GET"]),
    Route(REST_PREFIX + card.V03_PATH + card.CARD_PATH, _agent_card(PROTOCOL_VERSION_0_3),
          methods=["GET"]),
    Route(REST_PREFIX, rpc, methods=["POST"]),
    # The v0.3 interface's URL: the same dispatcher (it reads both versions' methods).
    Route(REST_PREFIX + card.V03_PATH, rpc, methods=["POST"]),
    *rest_routes(),
]

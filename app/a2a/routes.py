"""A2A routes: ``/a2a/{agent_id}`` (JSON-RPC, v1.0 and v0.3), its card, and the
gateway's catalogue. The route authenticates the caller and checks that it may
talk to the agent before the SDK's dispatcher parses and answers the call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.server.routes.rest_routes import create_rest_routes
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from app import ratelimit
from app.a2a import card
from app.a2a.handler import CALL_KEY, MeshCall, MeshRequestHandler
from app.api import deps
from app.api.auth import client_address
from app.errors import Problem
from app.services import accounts, tasks
from app.services.principals import Agent

API_KEY_HEADER = "x-api-key"


async def caller(request: Request) -> Agent:
    """A mesh agent, by its bearer JWT (an owner's token acts as its virtual
    user, as everywhere) or by its API key in ``X-API-Key`` — the card's schemes."""
    api_key = request.headers.get(API_KEY_HEADER)
    if not api_key:
        return await deps.agent(request)
    deps.check_path_params(request)
    s = deps.state(request)
    # The token exchange's look-up and failure throttle (ADR 032).
    me = await accounts.agent_by_key(s.pool, api_key, address=client_address(request),
                                     throttle=s.auth_throttle, where=" in X-API-Key")
    if s.ratelimiter is not None:
        await ratelimit.require(s.ratelimiter, me.agent_id, request.method, "/a2a/{agent_id}")
    request.scope["mesh.principal"] = me
    return me


def _resume_after(request: Request) -> int | None:
    raw = request.headers.get("last-event-id")
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= deps.BIGINT_MAX:
        raise Problem(400, f"Last-Event-ID must be the seq of an event (a non-negative integer, "
                           f"metadata['agent-mesh.seq']), got '{raw}'")
    return value


class MeshContextBuilder(DefaultServerCallContextBuilder):
    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[CALL_KEY] = MeshCall(
            state=deps.state(request), me=request.scope["mesh.principal"],
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
        await tasks.check_can_message(deps.state(request).pool, me.agent_id,
                                      request.path_params["agent_id"])
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


def _card_response(agent_card: card.AgentCard) -> Response:
    return JSONResponse(agent_card_to_dict(agent_card))


async def agent_card(request: Request) -> Response:
    deps.check_path_params(request)
    return _card_response(card.public_card(str(request.base_url),
                                           request.path_params["agent_id"], card.VERSION))


async def gateway_card(request: Request) -> Response:
    return _card_response(card.catalogue(str(request.base_url), card.VERSION))


routes: list[BaseRoute] = [
    Route("/.well-known/agent-card.json", gateway_card, methods=["GET"]),
    Route("/a2a/{agent_id}/.well-known/agent-card.json", agent_card, methods=["GET"]),
    Route("/a2a/{agent_id}", rpc, methods=["POST"]),
    *rest_routes(),
]

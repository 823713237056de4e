"""``/mcp``: the mesh tools over Streamable HTTP, on the official SDK's session
manager in stateless JSON mode — every POST stands alone (protocol 2026-07-28's
``server/discover`` envelope, or 2025-11-25's ``initialize`` without a session), so
any web process answers any call and no sticky sessions are needed.

In front of the SDK: the ``Origin`` check (a browser page of a foreign origin gets a
403), the caller's authentication (401 with the RFC 9728 challenge), and the
heartbeat its calls count as."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from app.mcp import auth, oauth, tools
from app.mcp.presence import Heartbeats
from app.platform.errors import Problem
from app.platform.settings import Settings
from app.web.state import state
from meshd.mcp.tool_server import build_server


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def check_origin(request: Request, allowed: frozenset[str]) -> None:
    """A browser sends ``Origin``; only the gateway's own and the configured ones
    pass. Clients that are not browsers send none."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    if origin.lower().rstrip("/") in allowed or _origin(origin) == _origin(str(request.base_url)):
        return
    raise Problem(403, f"Origin '{origin[:200]}' may not call /mcp: only the gateway's own "
                       "origin and MESH_MCP_ALLOWED_ORIGINS are served")


class McpEndpoint:
    """The ASGI app of the route; the SDK answers what passes the checks."""

    def __init__(self, settings: Settings) -> None:
        self.server = build_server(tools.HANDLERS, tools.explain)
        self.manager = StreamableHTTPSessionManager(self.server, stateless=True, json_response=True)
        self.allowed = frozenset(o.lower().rstrip("/") for o in settings.mcp_allowed_origins)
        self.heartbeats = Heartbeats(settings.mcp_heartbeat_interval_seconds)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        check_origin(request, self.allowed)
        me = await auth.authenticate(request)
        await self.heartbeats.beat(state(request).pool, me)
        await self.manager.handle_request(scope, receive, send)


def routes(endpoint: McpEndpoint) -> list[BaseRoute]:
    return [
        # POST only: the server never speaks first, so a GET stream would stay open with
        # nothing to say, and with no sessions a DELETE has nothing to end (405 for both,
        # as Streamable HTTP allows).
        Route(auth.PATH, endpoint, methods=["POST"]),
        # RFC 9728 §3.1 puts the resource's path after the suffix; some clients ask
        # at the bare suffix, so both answer.
        Route(auth.METADATA_PATH + auth.PATH, auth.protected_resource, methods=["GET"]),
        Route(auth.METADATA_PATH, auth.protected_resource, methods=["GET"]),
        *oauth.routes(),
    ]

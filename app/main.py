"""The gateway's ASGI application: ``uvicorn app.main:create_app --factory``."""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from app.a2a import routes as a2a_routes
from app.api import (
    admin,
    auth,
    inbox,
    index,
    mesh,
    owners,
    publications,
    runs,
    sse,
    tasks,
    teams,
    timeline,
    webhooks,
)
from app.console.routes import console_routes
from app.delivery.after_commit import AfterCommit
from app.delivery.inbox_hub import InboxHub
from app.mcp import routes as mcp_routes
from app.platform import db, tracing
from app.platform.errors import (
    Problem,
    handle_disconnect,
    handle_http,
    handle_problem,
    handle_unexpected,
    handle_validation,
)
from app.platform.observability import init_sentry, setup_logging
from app.platform.settings import Settings, load_settings, refusals
from app.platform.unavailable import UNAVAILABLE, handle_unavailable
from app.services.auth_throttle import AuthThrottle
from app.services.inbox import ReceiptBatcher
from app.services.inbox_stream import Recheck
from app.services.kdf import Kdf
from app.services.principal_cache import PrincipalCache
from app.services.reach_cache import ReachCache
from app.services.task_creates import CreateBatcher
from app.store import social as social_store
from app.store.events import relay_wakeup_channel
from app.web import health, openapi
from app.web.health import close_bus_probes
from app.web.middleware import BodyLimit, EncodedSlashGuard, RequestMetrics, Traced
from app.web.ratelimit import RateLimiter
from app.web.sse_response import StreamsOutside
from app.web.state import State, state
from app.web.stream_slots import StreamSlots, feed_refusal

log = logging.getLogger("mesh.app")

VERSION = "0.1.0"


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    s = state(request)
    status, body = await health.readiness(s.pool, s.redis, s.settings)
    return JSONResponse(body, status_code=status)


async def metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from app.web import metrics_access

    metrics_access.check(request, state(request).settings.metrics_token)

    return PlainTextResponse(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def configure_gc(settings: Settings) -> None:
    """The collector of a web process that holds thousands of open streams
    (ADR 026): every pass walks what is alive in its generations, each open
    stream's objects too, so passes must be rare, not small."""
    gc.set_threshold(*settings.web_gc_threshold)
    log.info("gc thresholds %s", gc.get_threshold())


class MeshApp(Starlette):
    """Starlette with :class:`StreamsOutside` around its whole stack: an open
    event stream keeps none of the middleware, exception and routing frames
    (ADR 026)."""

    def build_middleware_stack(self) -> ASGIApp:
        return StreamsOutside(super().build_middleware_stack())


def api_routes() -> list[BaseRoute]:
    return [*auth.routes, *owners.routes, *mesh.routes, *tasks.routes, *inbox.routes, *sse.routes,
            *admin.routes, *timeline.routes, *teams.routes, *webhooks.routes,
            *publications.routes, *runs.routes]


def refuse_unsafe(settings: Settings) -> None:
    """Exit (non-zero, the reason on stderr and in the log) before serving with
    settings a deployment must not run with (ADR 032)."""
    reasons = refusals(settings)
    if reasons:
        for reason in reasons:
            log.critical("refusing to start: %s", reason)
        raise SystemExit("refusing to start: " + "; ".join(reasons))


def create_app(settings: Settings | None = None) -> MeshApp:
    settings = settings or load_settings()
    setup_logging(settings, "web")
    refuse_unsafe(settings)
    init_sentry(settings, "web")
    mcp = mcp_routes.McpEndpoint(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        pool = await db.create_pool(settings)
        redis = aioredis.from_url(settings.redis_url)
        hub = InboxHub(settings.redis_url)
        # Served only while the hub is subscribed: notices missed meanwhile would
        # leave entries stale (a resubscribe clears them: the listeners' reset).
        principals = PrincipalCache(settings.web_cache_max_entries,
                                    settings.web_cache_ttl_seconds,
                                    enabled=hub.connected.is_set, redis=redis)
        reach = ReachCache(settings.web_cache_max_entries, settings.web_cache_ttl_seconds,
                           functools.partial(social_store.pair_relationships, pool),
                           enabled=hub.connected.is_set, redis=redis)
        hub.add_listener(principals)
        hub.add_listener(reach)
        await hub.start()
        limiter = RateLimiter(redis, settings) if settings.ratelimit_enabled else None
        # Commit notices with the relays' wake-up, and batched receipts (ADR 021).
        wakeup = AfterCommit(pool, redis, hub,
                             relay_channel=relay_wakeup_channel(settings.bus_topic))
        receipts = ReceiptBatcher(pool, flush_ms=settings.receipt_flush_ms,
                                  flush_max=settings.receipt_flush_max)
        await wakeup.start()
        await receipts.start()
        creates = CreateBatcher(pool, settings.bus_topic, wakeup,
                                max_batch=settings.create_batch_max,
                                in_flight=settings.create_batch_in_flight)
        app.state.mesh = State(settings=settings, pool=pool, redis=redis, hub=hub,
                               ratelimiter=limiter, wakeup=wakeup,
                               auth_throttle=AuthThrottle(redis, settings),
                               kdf=Kdf.from_settings(settings),
                               sse_slots=StreamSlots(settings.sse_max_streams_per_agent),
                               feed_slots=StreamSlots(
                                   settings.console_feed_max_streams_per_owner, feed_refusal),
                               principals=principals, reach=reach, creates=creates,
                               receipts=receipts,
                               sse_recheck=Recheck(pool, settings.sse_recheck_seconds))
        configure_gc(settings)
        try:
            async with mcp.running():  # the SDK's task group for /mcp calls
                yield
        finally:
            await wakeup.stop()
            await receipts.stop()
            await close_bus_probes()
            await hub.stop()
            await redis.aclose()
            await pool.close()
            tracing.shutdown()

    routes = api_routes()
    spec: dict[str, Any] = openapi.build(routes, title="Agent Mesh", version=VERSION)
    page = openapi.render_html(spec)

    async def openapi_json(request: Request) -> Response:
        return JSONResponse(spec)

    async def docs(request: Request) -> Response:
        return HTMLResponse(page)

    routes += [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi_json, methods=["GET"]),
        Route("/docs", docs, methods=["GET"]),
        *a2a_routes.routes,
        *mcp_routes.routes(mcp),  # remote MCP (JSON-RPC, not in /openapi.json)
    ]
    routes += console_routes()  # the owner console (HTML, not in /openapi.json)
    routes += index.routes  # `/`: the console for a browser, an index for a client
    app = MeshApp(
        routes=routes,
        middleware=[
            Middleware(RequestMetrics),
            Middleware(EncodedSlashGuard),
            Middleware(BodyLimit, max_body_size=settings.max_body_bytes,
                       console_max=max(settings.console_form_max_bytes, settings.max_body_bytes)),
            # Only while tracing is on: off, a request passes no tracing code.
            *([Middleware(Traced)] if tracing.setup("web") else []),
        ],
        exception_handlers={
            Problem: handle_problem,
            ValidationError: handle_validation,
            HTTPException: handle_http,
            Exception: handle_unexpected,
            ClientDisconnect: handle_disconnect,
            **{cls: handle_unavailable for cls in UNAVAILABLE},
        },
        lifespan=lifespan,
    )
    app.state.settings = settings
    return app

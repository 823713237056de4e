"""ASGI middleware: request metrics, and problem+json (or, for the console, HTML) for Starlette's 413."""

from __future__ import annotations

import json
from collections.abc import Awaitable

from starlette.middleware.body_limit import RequestBodyLimitMiddleware
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.platform import tracing
from app.platform.errors import PROBLEM_JSON
from app.platform.metrics import HTTP_REQUESTS
from app.web.sse_response import OUTSIDE

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class _Status:
    """The status a response started with, noted on the way out (500 until then)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.code = 500

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.code = message["status"]
        await self._send(message)


class RequestMetrics:
    """Counts requests by route *template* (not raw path: agent ids would
    explode the label set) and status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = _Status(send)

        try:
            await self.app(scope, receive, status.send)
        finally:
            stream = scope.get(OUTSIDE)
            if stream is not None:
                # An event stream handed to StreamsOutside: counted as it starts
                # (its status is the 200 it will send), not when it ends.
                status.code = stream.status_code
            route = scope.get("route")
            template = route.path if isinstance(route, BaseRoute) and hasattr(route, "path") \
                else "unmatched"
            # The method is the client's word: unknown ones share one label value,
            # so no request can add series of its own.
            method = scope["method"] if scope["method"] in _METHODS else "OTHER"
            HTTP_REQUESTS.labels(route=f"{method} {template}", status=str(status.code)).inc()


class ProblemBodyLimit:
    """Starlette's own body limit answers 413 in plain text; clients of this API
    expect problem+json everywhere, so its 413 is re-worded here (the limiting
    itself stays Starlette's)."""

    def __init__(self, app: ASGIApp, max_body_size: int) -> None:
        self.app = app
        self.max_body_size = max_body_size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rewriting = False

        async def send_wrapper(message: Message) -> None:
            nonlocal rewriting
            if message["type"] == "http.response.start" and message["status"] == 413:
                headers = dict(message.get("headers", []))
                if headers.get(b"content-type", b"").startswith(b"text/plain"):
                    rewriting = True
                    body = json.dumps({
                        "type": "about:blank", "title": "Content Too Large", "status": 413,
                        "detail": f"request body exceeds the limit of {self.max_body_size} bytes",
                        "limit_bytes": self.max_body_size}).encode()
                    await send({"type": "http.response.start", "status": 413, "headers": [
                        (b"content-type", PROBLEM_JSON.encode()),
                        (b"content-length", str(len(body)).encode())]})
                    await send({"type": "http.response.body", "body": body})
                    return
            if rewriting:
                return
            await send(message)

        await self.app(scope, receive, send_wrapper)


class EncodedSlashGuard:
    """The server decodes ``%2F`` before routing, so ``/v1/agents/a%2Fkeys`` would
    reach the route of ``/v1/agents/a/keys``. No id may hold a ``/``, so such a
    path is a 404 here, before routing."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # Not async: passing through returns the inner app's coroutine (a tail
        # call), so an open SSE stream does not keep a frame of this layer alive.
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw and b"%2f" in raw.split(b"?", 1)[0].lower():
            return self._refuse(send)
        return self.app(scope, receive, send)

    @staticmethod
    async def _refuse(send: Send) -> None:
        body = json.dumps({
            "type": "about:blank", "title": "Not Found", "status": 404,
            "detail": "no route for this path: an encoded '/' (%2F) is not allowed in a "
                      "path segment, and no id contains one"}).encode()
        await send({"type": "http.response.start", "status": 404, "headers": [
            (b"content-type", PROBLEM_JSON.encode()),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class ConsoleBodyLimit:
    """The console's forms are read by a person: past even the console's larger
    limit, Starlette's 413 is answered with a short HTML page, not JSON."""

    PAGE = ("<!doctype html><html lang=en><head><meta charset=utf-8><title>Too large</title>"
            "<link rel=stylesheet href=/console/static/console.css></head><body><main>"
            "<section class=card><h1>Too large</h1><p class=problem role=alert data-status=413>"
            "What you sent is larger than {limit} MiB, more than the console accepts. "
            "Go back with your browser (the text you typed is usually still there), shorten it "
            "and send it again.</p><p><a href=/console/>Back to the dashboard</a></p>"
            "</section></main></body></html>")

    def __init__(self, app: ASGIApp, max_body_size: int) -> None:
        self.app = app
        self.body = self.PAGE.format(limit=f"{max_body_size / 2**20:g}").encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rewriting = False

        async def send_wrapper(message: Message) -> None:
            nonlocal rewriting
            # A form's own 413 is already its page (with the typed text): left alone.
            if message["type"] == "http.response.start" and message["status"] == 413 and \
                    not dict(message.get("headers", [])).get(b"content-type", b"").startswith(b"text/html"):
                rewriting = True
                await send({"type": "http.response.start", "status": 413, "headers": [
                    (b"content-type", b"text/html; charset=utf-8"),
                    (b"content-length", str(len(self.body)).encode()),
                    (b"cache-control", b"no-store")]})
                await send({"type": "http.response.body", "body": self.body})
                return
            if rewriting:
                return
            await send(message)

        await self.app(scope, receive, send_wrapper)


class BodyLimit:
    """The request body limit (Starlette's, worded as problem+json by
    :class:`ProblemBodyLimit`) for requests that carry a body. A request without
    one (no Content-Length or 0, no Transfer-Encoding: every GET, every SSE
    stream) is handed straight to the app as a tail call, so the two limiting
    layers hold no frames for the lifetime of a stream (ADR 023).

    Console form posts get ``console_max`` instead: their handlers refuse what
    is over ``max_body_size`` themselves, on the form's page with the typed text
    kept (ADR 038)."""

    def __init__(self, app: ASGIApp, max_body_size: int, console_max: int | None = None) -> None:
        self.app = app
        self.limited = ProblemBodyLimit(RequestBodyLimitMiddleware(app, max_body_size),
                                        max_body_size)
        cmax = console_max or max_body_size
        self.console = ConsoleBodyLimit(RequestBodyLimitMiddleware(app, cmax), cmax)

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] == "http" and not _has_body(scope):
            return self.app(scope, receive, send)
        if scope["type"] == "http" and scope["path"].startswith("/console/"):
            return self.console(scope, receive, send)
        return self.limited(scope, receive, send)


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


class Traced:
    """One server span per write request (``mesh.send``: a task, a message, a
    status change…), a child of the caller's ``traceparent`` when it sent one;
    the inbox events the request writes carry this span's traceparent (ADR 042).
    Reads only adopt the caller's context. In the stack only while tracing is on."""

    WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]
                   if k == b"traceparent"}
        if scope["method"] not in self.WRITES:
            with tracing.request_context(headers):
                await self.app(scope, receive, send)
            return
        status = _Status(send)

        with tracing.span("mesh.send", traceparent=headers.get("traceparent"),
                          kind=tracing.SpanKind.SERVER,
                          attributes={"http.request.method": scope["method"],
                                      "url.path": scope["path"]}) as span:
            try:
                await self.app(scope, receive, status.send)
            finally:
                if span is not None:
                    span.set_attribute("http.response.status_code", status.code)

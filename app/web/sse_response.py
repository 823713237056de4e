"""A lean ``text/event-stream`` response: one coroutine per stream, the request's own.

sse-starlette's EventSourceResponse runs a task group of four tasks per stream
(sender, ping, disconnect listener, exit-signal listener): 17–18 KB of the
44 KB an idle stream held (ADR 023). Here nothing runs beside the request's
coroutine:

- keep-alives are frames the caller's wait loop yields when its wait times out;
- the wait itself is a ``receive()`` (:class:`Client`): it returns the moment
  the client disconnects, and a hub wake-up or the keep-alive tick ends it by
  its timeout; on an ASGI 2.4 server ``send`` raises ``OSError`` as well;
- server shutdown reaches every open stream through ONE watcher task per
  process (:class:`ShutdownWatch`), which stops them all when uvicorn begins to
  exit — else uvicorn would wait for endless responses to end.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Generic, TypeVar

from sse_starlette.sse import AppStatus
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.delivery.inbox_hub import Waiter

log = logging.getLogger("mesh.sse")

T = TypeVar("T")


class Client:
    """The client's end of one stream, waited on in the stream's own coroutine.

    :meth:`wait` blocks in ``receive()``, which returns only when the client
    leaves (``http.disconnect``: uvicorn answers it from ``connection_lost``),
    under a timeout that is the keep-alive tick. A hub wake-up (the waiter's
    ``on_wake``) moves that timeout to now. So one suspended coroutine learns of
    a notice, a tick and a disconnect alike, at once, with no listener task.
    Cancelling a pending ``receive()`` is what every task-group SSE response
    does to its listener, so servers handle it. Whether it was woken is the
    waiter's own flag, so a wake-up while the stream reads or writes — before
    its first wait too — makes the next wait return at once.
    """

    __slots__ = ("_receive", "_timeout")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._timeout: asyncio.Timeout | None = None

    def _wake(self) -> None:
        timeout = self._timeout
        if timeout is not None and not timeout.expired():
            timeout.reschedule(0)  # in the past: fires at the next loop turn

    async def wait(self, waiter: Waiter, timeout: float) -> bool | None:
        """True when woken, False when ``timeout`` passed, None when the client left."""
        waiter.on_wake = self._wake
        if waiter.take_woken():
            return True
        try:
            async with asyncio.timeout(timeout) as self._timeout:
                # The GET's (empty) body may come first; anything but the
                # disconnect is not ours to act on.
                while (await self._receive())["type"] != "http.disconnect":
                    pass
            return None
        except TimeoutError:
            return waiter.take_woken()
        finally:
            self._timeout = None


def _server_exiting() -> bool:
    """uvicorn has begun its shutdown. sse-starlette patches ``Server.handle_exit``
    to set ``AppStatus.should_exit``; uvicorn binds its handler before the app is
    imported, so the patch may miss, and the server behind the SIGTERM handler
    is asked too (what sse-starlette's own watcher does)."""
    if AppStatus.should_exit:
        return True
    server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return bool(getattr(server, "should_exit", False))


class ShutdownWatch:
    """Stops every open stream of this process when the server begins to exit.

    One polling task per process while any stream is open (not one listener
    per stream); it ends with the last stream and starts again with the next.
    """

    POLL_SECONDS = 0.5

    def __init__(self, exiting: Callable[[], bool] = _server_exiting) -> None:
        self._exiting = exiting
        self._open: set[Callable[[], None]] = set()
        self._task: asyncio.Task[None] | None = None

    def add(self, stop: Callable[[], None]) -> None:
        self._open.add(stop)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="sse-shutdown-watch")

    def discard(self, stop: Callable[[], None]) -> None:
        self._open.discard(stop)

    def __len__(self) -> int:
        return len(self._open)

    async def _run(self) -> None:
        while self._open:
            if self._exiting():
                log.info("server exiting: ending %d open event streams", len(self._open))
                for stop in list(self._open):
                    stop()
                return
            await asyncio.sleep(self.POLL_SECONDS)


SHUTDOWN = ShutdownWatch()


# The raw header lines per set of extra headers (EventStreamResponse.__init__).
_HEADERS: dict[tuple[tuple[str, str], ...], list[tuple[bytes, bytes]]] = {}


class EventStreamResponse(Response, Generic[T]):
    """Sends ``encode(item)`` for each item ``items(client)`` yields, as it comes.

    ``items`` is called only once the response starts (never for HEAD), with
    the :class:`Client` its loop waits on; ``stop`` makes that loop end
    soon (server shutdown); ``on_close`` runs once the stream has ended. The
    items are encoded here rather than by a generator around them: one frame
    less held per idle stream. Headers as sse-starlette's response sent them.
    """

    media_type = "text/event-stream"

    def __init__(self, items: Callable[[Client], AsyncGenerator[T, None]],
                 encode: Callable[[T], bytes], *, stop: Callable[[], None],
                 on_close: Callable[[], None] | None = None,
                 headers: Mapping[str, str] | None = None,
                 shutdown: ShutdownWatch = SHUTDOWN) -> None:
        self.status_code = 200
        self.background = None
        self._items = items
        self._encode = encode
        self._stop = stop
        self._on_close = on_close
        self._shutdown = shutdown
        key = tuple(headers.items()) if headers else ()
        shared = _HEADERS.get(key)
        if shared is None:
            self.init_headers({"Cache-Control": "no-store", "X-Accel-Buffering": "no",
                               **(headers or {}), "Connection": "keep-alive"})
            if len(_HEADERS) < 16:  # a route passes the same few headers every time
                _HEADERS[key] = self.raw_headers
        else:
            # One list of header lines for every stream of a route (about 0.6 KB
            # each otherwise): nothing changes a stream's headers after this.
            self.raw_headers = shared

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if OUTSIDE in scope and scope[OUTSIDE] is None:
            # Served by StreamsOutside once the middleware stack has returned: none
            # of the stack's frames stays suspended for the life of the stream.
            scope[OUTSIDE] = self
            return
        await self.run(scope, receive, send)

    async def run(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the stream (one frame for the response: the encoding loop is here too)."""
        try:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            if scope.get("method") == "HEAD":  # an endless body would never let HEAD end
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            items = self._items(Client(receive))
            encode = self._encode
            self._shutdown.add(self._stop)
            try:
                async for item in items:
                    await send({"type": "http.response.body", "body": encode(item),
                                "more_body": True})
            except OSError:
                return  # ASGI 2.4: the client is gone; nothing more can be sent
            finally:
                self._shutdown.discard(self._stop)
                await items.aclose()  # its finally runs now, also when send failed
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if self._on_close is not None:
                self._on_close()


# The scope key by which StreamsOutside offers to run an event stream after the
# stack: None while the request is in the stack, then the response to run.
OUTSIDE = "mesh.stream_outside"


class StreamsOutside:
    """The outermost ASGI layer (outside Starlette's error middleware): an
    :class:`EventStreamResponse` returned by a route is run here, after the
    middleware, exception and routing layers have returned.

    Those layers (Starlette's ServerErrorMiddleware, ExceptionMiddleware, its
    exception wrappers, Router, Route, request_response; app.web.middleware's
    RequestMetrics) would otherwise stay suspended, with their send wrappers
    and the Request, for the whole life of every open stream (ADR 026). What
    they do for a stream is done before it starts: errors raised by the route
    (401, 404, 422, 429 …) are answered by them as for any request, and
    RequestMetrics counts the stream with its status when it is handed out.
    An exception in the stream itself comes after the 200 went out, so no
    handler could answer it anyway: it reaches the server, which logs it.
    """

    __slots__ = ("app",)

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[OUTSIDE] = None
        await self.app(scope, receive, send)
        stream = scope[OUTSIDE]
        if stream is not None:
            scope[OUTSIDE] = None  # run once; the response holds what it needs
            await stream.run(scope, receive, send)

"""The lean SSE response (app.web.sse_response) on a real uvicorn gateway: the
stream's one coroutine learns of a disconnect at once, HEAD holds no stream,
keep-alives and headers are the wire they were, and the per-process Postgres
re-check brings an event that no notice announced."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Callable

import asyncpg
import redis.asyncio as aioredis

from app.delivery.inbox_hub import InboxHub
from app.domain.event_wire import WireEvent
from app.platform.settings import Settings
from app.services.inbox_stream import InboxStream
from app.services.principals import Agent
from app.store import inbox as inbox_store
from app.web.sse_response import SHUTDOWN
from tests.support.meshapi import MeshFactory
from tests.support.servers import serve_app

# Nothing but the client leaving can end a wait within a test's time.
QUIET = {"sse_keepalive_seconds": 3600.0, "sse_recheck_seconds": 3600.0,
         "sse_max_streams_per_agent": 1}


async def until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    """State of this process that nothing signals: looked at until it holds."""
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def raw_stream(url: str, headers: dict[str, str], method: str = "GET"
                     ) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    lines = [f"{method} /v1/mesh/inbox/stream HTTP/1.1", f"Host: {host}",
             *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    writer.write("\r\n".join(lines).encode())
    await writer.drain()
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def test_a_client_that_leaves_ends_its_stream_at_once(migrated: Settings) -> None:
    settings = migrated.model_copy(update=QUIET)
    async with serve_app(settings) as url, MeshFactory.connect(url) as mesh:
        _, b = await mesh.pair()
        before = len(SHUTDOWN)
        async with raw_stream(url, b.headers) as (reader, _):
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
            await until(lambda: len(SHUTDOWN) == before + 1)
        # No keep-alive, re-check or event is due for an hour: only the
        # disconnect, seen by the wait in receive(), ends the stream.
        await until(lambda: len(SHUTDOWN) == before)
        # And its slot is free again (the cap is 1).
        async with mesh.http.stream("GET", "/v1/mesh/inbox/stream", headers=b.headers) as again:
            assert again.status_code == 200


def _frames(coro: object) -> list[str]:
    """``module:qualname`` of every frame a task's coroutine is suspended in, outermost first."""
    out: list[str] = []
    while coro is not None:
        code = getattr(coro, "cr_code", None) or getattr(coro, "ag_code", None)
        if code is None:  # a Future (or a C awaitable): the bottom of the chain
            break
        out.append(f"{code.co_filename}:{code.co_qualname}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
    return out


async def test_an_open_stream_holds_no_frame_of_the_middleware_stack(
        migrated: Settings) -> None:
    """StreamsOutside (ADR 026): while a stream is open, none of Starlette's
    middleware, exception or routing layers nor RequestMetrics is suspended
    under it, and the request has been counted with its 200 already."""
    settings = migrated.model_copy(update=QUIET)
    route = 'route="GET /v1/mesh/inbox/stream",status="200"'

    async def counted() -> float:
        text = (await mesh.http.get("/metrics")).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("agent_mesh_http_requests_total{") and route in line)

    async with serve_app(settings) as url, MeshFactory.connect(url) as mesh:
        _, b = await mesh.pair()
        before = await counted()
        async with raw_stream(url, b.headers) as (reader, _):
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")

            def open_streams() -> list[list[str]]:
                chains = [_frames(t.get_coro()) for t in asyncio.all_tasks()]
                return [c for c in chains if any("EventStreamResponse.run" in f for f in c)]

            await until(lambda: bool(open_streams()))
            [frames] = open_streams()
            held = [f for f in frames if any(part in f for part in (
                "starlette/middleware/", "starlette/routing.py", "starlette/_exception_handler",
                "app/web/middleware.py"))]
            assert not held, frames
            assert await counted() == before + 1  # counted as it started, not at its end


async def test_head_sends_the_headers_and_holds_no_stream(migrated: Settings) -> None:
    settings = migrated.model_copy(update=QUIET)
    async with serve_app(settings) as url, MeshFactory.connect(url) as mesh:
        _, b = await mesh.pair()
        head = await mesh.http.head("/v1/mesh/inbox/stream", headers=b.headers)
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-type"] == "text/event-stream; charset=utf-8"
        async with mesh.http.stream("GET", "/v1/mesh/inbox/stream", headers=b.headers) as get:
            assert get.status_code == 200  # HEAD took no slot of the 1


async def test_keep_alives_and_headers_are_the_wire_they_were(migrated: Settings) -> None:
    settings = migrated.model_copy(update={"sse_keepalive_seconds": 0.2})
    async with serve_app(settings) as url, MeshFactory.connect(url) as mesh:
        _, b = await mesh.pair()
        async with raw_stream(url, b.headers) as (reader, _):
            head = (await reader.readuntil(b"\r\n\r\n")).decode().lower().split("\r\n")
            assert head[0] == "http/1.1 200 ok"
            for line in ("cache-control: no-cache", "x-accel-buffering: no",
                         "connection: keep-alive", "transfer-encoding: chunked",
                         "content-type: text/event-stream; charset=utf-8"):
                assert line in head
            # One chunk per frame (the pairing's events first): size line, frame.
            chunks: list[bytes] = []
            async with asyncio.timeout(20):
                while b": keep-alive\r\n\r\n" not in chunks:
                    size = int(await reader.readuntil(b"\r\n"), 16)
                    chunks.append((await reader.readexactly(size + 2))[:-2])
            assert all(c.startswith(b"id: ") for c in chunks[:-1])


async def test_one_recheck_brings_an_event_no_notice_announced(
        mesh: MeshFactory, migrated: Settings, db: asyncpg.Pool,
        redis_client: aioredis.Redis) -> None:
    a, b = await mesh.pair()
    # A stream in this process whose hub never starts (no notice reaches it) and
    # whose keep-alive is an hour away: only the re-check timer can wake it.
    settings = migrated.model_copy(update={"sse_keepalive_seconds": 3600.0,
                                           "sse_recheck_seconds": 0.2})
    who = Agent(b.agent_id, 0, "normal")
    after = (await inbox_store.newest_seqs(db, [b.agent_id]))[b.agent_id]  # past the pairing's
    stream = await InboxStream.open(db, redis_client, InboxHub("redis://unused"), settings, who,
                                    after)
    items = stream.items()
    first: asyncio.Task[object] = asyncio.create_task(anext(items))
    await until(lambda: stream.recheck is not None and len(stream.recheck._streams) == 1)
    await a.send(b.agent_id, "no notice for this one")
    async with asyncio.timeout(30):
        event = await first
    assert isinstance(event, WireEvent) and event.seq == after + 1
    assert event.type == "task.created"  # the send's first event
    assert stream.recheck is not None and stream.recheck.rounds >= 1
    recheck = stream.recheck
    await items.aclose()
    assert len(recheck._streams) == 0
    assert recheck._task is None  # the timer went with its last stream


async def test_the_web_process_applies_its_collector_thresholds(migrated: Settings) -> None:
    """MESH_WEB_GC_THRESHOLD (ADR 026) is what the serving process runs with."""
    before = gc.get_threshold()
    wanted = (before[0] + 1234, 7, 89)
    try:
        async with serve_app(migrated.model_copy(update={"web_gc_threshold": wanted})) as url:
            async with MeshFactory.connect(url) as mesh:
                assert (await mesh.http.get("/healthz")).status_code == 200
            assert gc.get_threshold() == wanted
    finally:
        gc.set_threshold(*before)

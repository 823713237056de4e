"""The live feed: events arriving in my agents' inboxes, as they happen.

``GET /console/feed/stream`` (cookie session) merges one
:class:`~app.services.inbox_stream.InboxStream` per agent of mine — the same
gap-filling, seq-ordered reader the agents' own SSE uses — into one SSE
stream. Its ``id:`` is the whole cursor, ``agent=seq,agent=seq``, so the
browser's automatic ``Last-Event-ID`` on reconnect resumes every agent exactly
where it stopped: no gap, no repeat. Watching is not delivery: the console
passes a no-op receipt recorder, so an owner looking never marks an event
delivered to the agent's daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response

from app.console.owned import my_agents
from app.console.web import Ctx, page, signed_in
from app.domain.event_wire import WireEvent
from app.domain.ids import is_valid_id
from app.responses import AgentOut
from app.services import accounts
from app.services.inbox import start_cursor
from app.services.inbox_stream import InboxStream
from app.services.principals import Agent, Owner
from app.services.stream import InboxReader
from app.store import inbox as inbox_store
from app.web import session as sessions
from app.web.stream_slots import Lease

log = logging.getLogger("mesh.console")

HISTORY = 20  # events per agent shown when the page opens


def encode_cursor(cursor: dict[str, int]) -> str:
    return ",".join(f"{agent}={seq}" for agent, seq in sorted(cursor.items()))


def decode_cursor(raw: str | None) -> dict[str, int] | None:
    if not raw:
        return None
    out: dict[str, int] = {}
    for item in raw.split(","):
        agent, _, seq = item.rpartition("=")
        if is_valid_id(agent) and seq.isdigit():
            out[agent] = int(seq)
    return out


async def _history(ctx: Ctx, agents: list[AgentOut]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    events: list[dict[str, Any]] = []
    cursor: dict[str, int] = {}
    for agent in agents:
        start = max(agent.inbox_seq - HISTORY, 0)
        batch = await inbox_store.after(ctx.state.pool, agent.agent_id, start, HISTORY)
        events += [{"agent_id": agent.agent_id, "event": json.loads(ev.data)} for ev in batch]
        cursor[agent.agent_id] = batch[-1].seq if batch else agent.inbox_seq
    events.sort(key=lambda e: e["event"]["created_at"], reverse=True)
    return events, cursor


@page
async def feed(ctx: Ctx) -> Response:
    agents = await my_agents(ctx)
    events, cursor = await _history(ctx, agents)
    return ctx.render("feed.html", nav="feed", events=events, cursor=encode_cursor(cursor))


async def _nothing(events: list[WireEvent]) -> None:
    return None


async def _open(request: Request, owner: Owner, agents: list[AgentOut],
                cursor: dict[str, int] | None) -> list[InboxStream]:
    s = request.app.state.mesh
    streams = []
    for agent in agents:
        who = Agent(agent.agent_id, owner.user_id, agent.kind)
        # With a cursor, an agent it does not name is new since: all of its events.
        after = agent.inbox_seq if cursor is None else cursor.get(agent.agent_id, 0)
        start = await start_cursor(s.pool, agent.agent_id, after)
        streams.append(InboxStream(
            InboxReader(s.pool, s.redis, agent.agent_id, start), s.hub, s.settings, who,
            still_valid=lambda who=who: accounts.still_valid(s.pool, who), delivered=_nothing,
            recheck=s.sse_recheck))
    return streams


async def _merged(request: Request, session: sessions.Session, streams: list[InboxStream],
                  cursor: dict[str, int], lease: Lease | None) -> AsyncIterator[bytes]:
    s = request.app.state.mesh
    queue: asyncio.Queue[tuple[str, WireEvent]] = asyncio.Queue(maxsize=1000)

    async def pump(stream: InboxStream) -> None:
        try:
            async for item in stream.items():
                if isinstance(item, WireEvent):
                    await queue.put((stream.who.agent_id, item))
        except Exception:  # one agent's stream failing must not end the others'
            log.exception("console feed: the stream of %s failed", stream.who.agent_id)

    tasks = [asyncio.create_task(pump(st)) for st in streams]
    ttl = s.settings.console_session_ttl_seconds
    try:
        while True:
            try:
                agent_id, ev = await asyncio.wait_for(queue.get(), s.settings.sse_keepalive_seconds)
            except TimeoutError:
                # Signing out ends the stream too, not only the next page load.
                if await sessions.load(s.redis, session.token, ttl) is None:
                    return
                yield b": keep-alive\r\n\r\n"
                continue
            cursor[agent_id] = ev.seq
            data = b'{"agent_id":%s,"event":%s}' % (json.dumps(agent_id).encode(), ev.data)
            # No ``event:`` line: the page's one ``onmessage`` handler takes every type.
            yield b"id: %s\r\ndata: %s\r\n\r\n" % (encode_cursor(cursor).encode(), data)
    finally:
        if lease is not None:
            lease.release()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t


async def stream(request: Request) -> Response:
    who = await signed_in(request)
    if who is None:
        return Response("sign in first", status_code=401, media_type="text/plain")
    owner, session = who
    s = request.app.state.mesh
    # Before any reader is opened: past the cap the refusal costs nothing. The
    # stream's end releases the slot (a response never sent: the lease's own end).
    lease = s.feed_slots.acquire(f"owner:{owner.user_id}") if s.feed_slots is not None else None
    cursor = decode_cursor(request.headers.get("last-event-id") or request.query_params.get("cursor"))
    agents = (await accounts.list_agents(s.pool, owner)).agents
    streams = await _open(request, owner, agents, cursor)
    start = {st.who.agent_id: st.source.last for st in streams}  # type: ignore[attr-defined]
    return EventSourceResponse(_merged(request, session, streams, start, lease), ping=0,
                               headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})



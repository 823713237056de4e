"""``GET /v1/mesh/inbox/stream``: the inbox as Server-Sent Events.

``id:`` is the seq, ``event:`` the type, ``data:`` the event JSON. A client
resumes after ``Last-Event-ID`` (or ``?after=``), else after its acked cursor.
Idle streams cost one waiter each on the process's single Redis subscription
(app.inbox_hub), plus a Postgres re-check every ``sse_recheck_seconds``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

from sse_starlette.sse import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.api.deps import agent, bearer, doc, int_query, state
from app.errors import Problem
from app.metrics import SSE_CONNECTIONS
from app.security import decode_token
from app.services import accounts, inbox
from app.services.stream import InboxReader


def _start_after(request: Request) -> int | None:
    header = request.headers.get("last-event-id")
    if header:
        try:
            value = int(header)
        except ValueError:
            raise Problem(422, f"Last-Event-ID must be an inbox seq (integer), got '{header}'") \
                from None
        if value < 0:
            raise Problem(422, "Last-Event-ID must be >= 0")
        return value
    return int_query(request, "after", default=None, minimum=0)


@doc("The inbox as Server-Sent Events (id = seq); resumes after Last-Event-ID, ?after=, "
     "or the acked cursor", auth="agent", tag="inbox")
async def stream(request: Request) -> Response:
    me = await agent(request)
    s = state(request)
    after = await inbox.start_cursor(s.pool, me.agent_id, _start_after(request))
    reader = InboxReader(s.pool, s.redis, me.agent_id, after)

    # The stream ends when the token expires or the credentials behind it are
    # revoked; the client reconnects (with Last-Event-ID) using a fresh token.
    expires_at = float(decode_token(s.settings, bearer(request))["exp"])

    async def events() -> AsyncIterator[ServerSentEvent]:
        # Wake at least every keep-alive interval, and often enough for the re-check.
        tick = min(s.settings.sse_keepalive_seconds, s.settings.sse_recheck_seconds)
        with SSE_CONNECTIONS.track_inprogress():
            async with s.hub.watch(me.agent_id) as waiter:
                from_postgres = False
                now = time.monotonic()
                checked_auth_at = read_postgres_at = now
                while True:
                    batch = await reader.next_batch(from_postgres=from_postgres)
                    from_postgres = False
                    if batch:
                        for ev in batch:
                            yield ServerSentEvent(data=json.dumps(ev, separators=(",", ":")),
                                                  event=ev["type"], id=str(ev["seq"]))
                        await inbox.record_delivery(s.pool, me.agent_id, batch)
                        continue
                    left = expires_at - time.time()
                    if left <= 0:
                        return
                    woke = await waiter.wait(min(tick, left))
                    now = time.monotonic()
                    if not woke:
                        # Keep-alives come from this loop rather than a ping task of
                        # sse-starlette's: one coroutine per idle stream, not two.
                        yield ServerSentEvent(comment="keep-alive")
                    if waiter.auth_changed or \
                            now - checked_auth_at > s.settings.sse_auth_recheck_seconds:
                        waiter.auth_changed = False
                        checked_auth_at = now
                        if not await accounts.still_valid(s.pool, me):
                            return
                    # Without a wake-up for a while, look at Postgres directly: a
                    # notification lost with Redis must delay an event, never lose it.
                    if not woke and now - read_postgres_at >= s.settings.sse_recheck_seconds:
                        from_postgres = True
                        read_postgres_at = now

    return EventSourceResponse(events(), ping=0,
                               headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


routes = [Route("/v1/mesh/inbox/stream", stream, methods=["GET"])]

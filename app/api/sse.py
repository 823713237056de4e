"""``GET /v1/mesh/inbox/stream``: the inbox as Server-Sent Events.

``id:`` is the seq, ``event:`` the type, ``data:`` the event JSON — its bytes
as app.domain.event_wire made them, not re-encoded. A client resumes after
``Last-Event-ID`` (or ``?after=``), else after its acked cursor. The stream's
loop (keep-alives, re-checks, expiry, receipts) is app.services.inbox_stream;
this module maps its items to frames; app.web.sse_response sends them from the
request's own coroutine (no task per stream, ADR 023).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.domain.event_wire import WireEvent, traceparent_of
from app.platform import tracing
from app.platform.errors import Problem
from app.services.inbox_stream import InboxStream, StreamItem
from app.services.principals import Agent
from app.web.endpoint import endpoint, header_param, query_param
from app.web.inputs import BIGINT_MAX, int_query
from app.web.sse_response import EventStreamResponse
from app.web.state import state

# Keep-alives come from the stream's own wait loop, on its timeout: one
# coroutine per idle stream, no ping task.
KEEP_ALIVE_FRAME = b": keep-alive\r\n\r\n"


def _start_after(request: Request) -> int | None:
    header = request.headers.get("last-event-id")
    if header:
        try:
            value = int(header)
        except ValueError:
            raise Problem(422, f"Last-Event-ID must be an inbox seq (integer), got '{header}'") \
                from None
        if not 0 <= value <= BIGINT_MAX:
            # Past BIGINT the driver fails mid-stream; refuse before the 200 goes out.
            raise Problem(422, f"Last-Event-ID must be an inbox seq between 0 and {BIGINT_MAX}, "
                               f"got '{header}'")
        return value
    return int_query(request, "after", default=None, minimum=0)


def frame(item: StreamItem) -> bytes:
    """One SSE frame. Event JSON never holds a raw line break (JSON escapes
    them), so ``data`` is one line."""
    if isinstance(item, WireEvent):
        return b"id: %d\r\nevent: %s\r\ndata: %s\r\n\r\n" % (item.seq, item.type.encode(),
                                                            item.data)
    return KEEP_ALIVE_FRAME


def traced_frame(item: StreamItem) -> bytes:
    """:func:`frame`, and the event's ``mesh.deliver`` span (tracing on only)."""
    if isinstance(item, WireEvent):
        tracing.delivered((traceparent_of(item.data),), "sse")
    return frame(item)


@endpoint("The inbox as Server-Sent Events (id = seq); resumes after Last-Event-ID, ?after=, "
     "or the acked cursor", media="text/event-stream", auth="agent", tag="inbox", params=[
         header_param("Last-Event-ID", "resume after this seq (an integer, 0 … 2^63-1); wins "
                      "over ?after=", pattern=r"^[0-9]{1,19}$"),
         query_param("after", "return events with seq > after (default: your acked cursor)")])
async def stream(request: Request, me: Agent) -> Response:
    s = state(request)
    inbox_stream = await InboxStream.open(s.pool, s.redis, s.hub, s.settings, me,
                                          _start_after(request), receipts=s.receipts,
                                          recheck=s.sse_recheck)
    lease = s.sse_slots.acquire(me.agent_id) if s.sse_slots is not None else None
    render = traced_frame if tracing.enabled else frame
    response = EventStreamResponse(inbox_stream.items, render, stop=inbox_stream.stop,
                                   on_close=lease.release if lease is not None else None,
                                   headers={"Cache-Control": "no-cache"})
    return response


routes = [Route("/v1/mesh/inbox/stream", stream, methods=["GET"])]

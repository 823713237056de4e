"""Agent side: the inbox read from Postgres (long-poll), its ack cursor, and a runtime's claims."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.domain.schemas import AckBody, ClaimBody
from app.responses import Acked, Claimed, InboxPage
from app.services import inbox
from app.services.principals import Agent
from app.web.endpoint import endpoint, json, query_param
from app.web.inputs import body, float_query, int_query
from app.web.state import state


@endpoint("Inbox events after a seq (default: your acked cursor); waits up to `wait` seconds "
     "for the next one", response=InboxPage, auth="agent", tag="inbox", params=[
         query_param("after", "return events with seq > after (default: your acked cursor)"),
         query_param("limit", "most events to return (default 100)", minimum=1, maximum=500),
         query_param("wait", "seconds to wait for an event when there is none (long-poll)",
                     type_="number", minimum=0, maximum=30)])
async def read(request: Request, me: Agent) -> Response:
    s = state(request)
    after = int_query(request, "after", default=None, minimum=0)
    limit = int_query(request, "limit", default=100, minimum=1, maximum=s.settings.inbox_page_max)
    wait = float_query(request, "wait", default=0.0, minimum=0.0,
                       maximum=s.settings.longpoll_max_wait_seconds)
    assert limit is not None
    # Already JSON: the events' stored wire bytes inside the page envelope.
    return Response(await inbox.read(s.pool, s.hub, me, after=after, limit=limit, wait=wait,
                                     recheck=s.settings.longpoll_recheck_seconds,
                                     receipts=s.receipts),
                    media_type="application/json")


@endpoint("Acknowledge processing up to seq (monotone; never moves back)", body=AckBody,
     response=Acked, auth="agent", tag="inbox")
async def ack(request: Request, me: Agent) -> Response:
    data = await body(request, AckBody)
    return json(await inbox.ack(state(request).pool, me, data.seq))


@endpoint("Claim the event you are about to handle (a runtime: `mesh daemon`, `mesh agent`), "
          "and with `ahead` the events after it: `claimed: false` means another reader of "
          "this agent (a remote MCP client) took it; `through` is the last seq the claim "
          "covers; the claim lapses `MESH_INBOX_CLAIM_SECONDS` after it was made or renewed",
          body=ClaimBody, response=Claimed, auth="agent", tag="inbox")
async def claim(request: Request, me: Agent) -> Response:
    data = await body(request, ClaimBody)
    s = state(request)
    return json(await inbox.claim_event(s.pool, me, data.seq, data.consumer,
                                        s.settings.inbox_claim_seconds, data.ahead))


routes = [
    Route("/v1/mesh/inbox", read, methods=["GET"]),
    Route("/v1/mesh/inbox/ack", ack, methods=["POST"]),
    Route("/v1/mesh/inbox/claim", claim, methods=["POST"]),
]

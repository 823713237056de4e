"""Admin owners (``MESH_ADMIN_USERNAMES``): the outbox and its dead letters."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.platform.errors import Problem
from app.responses import DeadLetters, OutboxOverview, RetriedAll, RetriedOne
from app.services import admin as admin_service
from app.services.principals import Owner
from app.web.endpoint import endpoint, json, query_param
from app.web.inputs import BIGINT_MAX, int_query
from app.web.state import state


@endpoint("Outbox rows by status (pending, sent, failed) and the age of the oldest pending one",
     response=OutboxOverview, auth="admin", tag="admin")
async def outbox(request: Request, me: Owner) -> Response:
    return json(await admin_service.outbox_overview(state(request).pool))


@endpoint("Dead letters (failed outbox rows) with their errors, oldest first; page with "
     "?after_id=<next_after_id>&limit=", response=DeadLetters, auth="admin", tag="admin",
     params=[query_param("after_id", "rows with id > after_id (default 0)"),
             query_param("limit", "most rows (default 100)", minimum=1, maximum=1000)])
async def dead_letters(request: Request, me: Owner) -> Response:
    after_id = int_query(request, "after_id", default=0, minimum=0)
    limit = int_query(request, "limit", default=100, minimum=1, maximum=1000)
    assert after_id is not None and limit is not None
    return json(await admin_service.dead_letters(state(request).pool, after_id=after_id,
                                                 limit=limit))


@endpoint("Retry one dead letter: back to pending with a fresh attempt budget, relay woken",
     response=RetriedOne, auth="admin", tag="admin")
async def retry_one(request: Request, me: Owner) -> Response:
    raw = request.path_params["row_id"]
    try:
        row_id = int(raw)
    except ValueError:
        raise Problem(422, f"an outbox row id is an integer, got '{raw}'") from None
    if not 1 <= row_id <= BIGINT_MAX:
        raise Problem(422, f"an outbox row id is between 1 and {BIGINT_MAX}, got '{raw}'")
    s = state(request)
    return json(await admin_service.retry_one(s, row_id))


@endpoint("Retry every dead letter (back to pending, relay woken)", response=RetriedAll,
     auth="admin", tag="admin")
async def retry_all(request: Request, me: Owner) -> Response:
    s = state(request)
    return json(await admin_service.retry_all(s))


routes = [
    Route("/v1/admin/outbox", outbox, methods=["GET"]),
    Route("/v1/admin/outbox/dead", dead_letters, methods=["GET"]),
    Route("/v1/admin/outbox/dead/retry", retry_all, methods=["POST"]),
    Route("/v1/admin/outbox/dead/{row_id}/retry", retry_one, methods=["POST"]),
]

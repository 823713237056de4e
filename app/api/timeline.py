"""Owner side: the message history of a context across your agents' tasks."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.responses import Timeline
from app.services import timeline
from app.services.principals import Owner
from app.web.endpoint import endpoint, json, query_param
from app.web.inputs import int_query, valid_id
from app.web.state import state


@endpoint("Message history of a context, oldest first, across tasks your agents take part in "
     "(?limit=, default 200); entries pages through tasks, messages, state changes and "
     "artifacts (?cursor=next_cursor)", response=Timeline, auth="owner", tag="owners",
     params=[query_param("limit", "most messages (default 200)", minimum=1, maximum=1000),
             query_param("cursor", "next_cursor of the previous page (entries)", type_="string")])
async def context_timeline(request: Request, me: Owner) -> Response:
    context_id = valid_id("context_id", request.path_params["context_id"])
    limit = int_query(request, "limit", default=200, minimum=1, maximum=1000)
    assert limit is not None
    return json(await timeline.context_timeline(state(request).pool, me, context_id, limit,
                                                request.query_params.get("cursor") or None))


routes = [Route("/v1/contexts/{context_id}/timeline", context_timeline, methods=["GET"])]

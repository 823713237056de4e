"""Owner side: an agent's webhook (ADR 035, docs/webhooks.md)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.domain.schemas import WebhookPut
from app.responses.webhooks import WebhookCreated, WebhookOut
from app.services import webhooks
from app.services.principals import Owner
from app.web.endpoint import endpoint, json
from app.web.inputs import body
from app.web.state import state


@endpoint("Register or replace the agent's webhook; the signing secret is shown only here "
     "(a replaced secret keeps signing for a grace period)", body=WebhookPut,
     response=WebhookCreated, auth="owner", tag="owners")
async def put_webhook(request: Request, me: Owner) -> Response:
    data = await body(request, WebhookPut)
    s = state(request)
    return json(await webhooks.put(s, me, request.path_params["agent_id"], data.url))


@endpoint("The agent's webhook: url, status, last error, last success, pending events",
     response=WebhookOut, auth="owner", tag="owners")
async def get_webhook(request: Request, me: Owner) -> Response:
    return json(await webhooks.get(state(request).pool, me, request.path_params["agent_id"]))


@endpoint("Remove the agent's webhook; its events stay in the inbox", auth="owner", status=204,
     tag="owners")
async def delete_webhook(request: Request, me: Owner) -> Response:
    await webhooks.remove(state(request), me, request.path_params["agent_id"])
    return Response(status_code=204)


routes = [
    Route("/v1/agents/{agent_id}/webhook", put_webhook, methods=["PUT"]),
    Route("/v1/agents/{agent_id}/webhook", get_webhook, methods=["GET"]),
    Route("/v1/agents/{agent_id}/webhook", delete_webhook, methods=["DELETE"]),
]

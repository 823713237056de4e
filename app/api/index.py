"""``/``: a browser lands in the console, an API client gets a small index."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

INDEX = {
    "name": "Agent Mesh",
    "links": {
        "docs": "/docs",
        "openapi": "/openapi.json",
        "console": "/console",
        "agent_card": "/.well-known/agent-card.json",
        "health": "/healthz",
    },
}


def wants_html(request: Request) -> bool:
    """A browser's navigation asks for text/html first; curl, SDKs and A2A
    clients send */* or application/json."""
    accept = request.headers.get("accept", "")
    return "text/html" in accept.split(",")[0]


async def index(request: Request) -> Response:
    if wants_html(request):
        return RedirectResponse("/console", status_code=303)
    return JSONResponse(INDEX)


routes = [Route("/", index, methods=["GET"])]

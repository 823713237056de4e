"""A documented endpoint: its OpenAPI facts and who may call it, stated once.

``@endpoint(summary, auth="agent", …)`` marks the handler for app.web.openapi and
authenticates the caller (app.web.auth) before the handler runs, passing it as
``me``: ``async def handler(request, me)``. Without ``auth`` the handler is public
and takes only the request."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from app.platform import fastjson
from app.web.auth import Need, authenticate
from app.web.inputs import BIGINT_MAX


def json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON response; a response model (app.responses) is serialized by its own rules."""
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    return Response(fastjson.dumps(data), status_code=status, headers=headers,
                    media_type="application/json")


Handler = Callable[..., Awaitable[Response]]


def endpoint(summary: str, *, auth: Need | Literal["on_behalf"] | None = None,
             **facts: Any) -> Callable[[Handler], Handler]:
    """A handler with its OpenAPI facts (:func:`doc`) and its caller: with ``auth``,
    the handler is ``async def (request, me)`` and runs only for a caller ``auth``
    admits (app.web.auth)."""
    def wrap(fn: Handler) -> Handler:
        if auth is None:
            return doc(summary, **facts)(fn)

        @functools.wraps(fn)
        async def authenticated(request: Request) -> Response:
            return await fn(request, await authenticate(request, auth))

        authenticated.__mesh_handler__ = fn  # type: ignore[attr-defined]
        return doc(summary, auth=auth, **facts)(authenticated)
    return wrap


def on_behalf(handler: Handler, summary: str, **facts: Any) -> Handler:
    """An agent endpoint served to the agent's owner: the same handler, on a route
    whose ``{agent_id}`` names the owner's agent it acts as (an owner token)."""
    own = {**handler.__mesh_doc__, **facts, "tag": "owners"}  # type: ignore[attr-defined]
    own.pop("auth")
    own.pop("summary")
    return endpoint(summary, auth="on_behalf", **own)(handler.__mesh_handler__)  # type: ignore[attr-defined]


def doc(summary: str, *, body: type[BaseModel] | None = None,
        response: type[BaseModel] | None = None, media: str | None = None,
        auth: str | None = None, status: int = 200, replay_status: int | None = None,
        tag: str = "mesh", params: list[dict[str, Any]] | None = None) -> Callable[[Any], Any]:
    """Attach OpenAPI facts to a handler; app.web.openapi collects them.

    ``response`` is the JSON body of a success (an app.responses model); ``media``
    names a success body that is not JSON (SSE); neither, with ``status=204``,
    means no body. ``replay_status`` documents the answer to an idempotent retry
    (200 for a create that was already done), with the same body. ``params`` are
    the query parameters and headers the handler reads (:func:`query_param`,
    :func:`header_param`), as OpenAPI parameter objects."""
    def mark(fn: Any) -> Any:
        fn.__mesh_doc__ = {"summary": summary, "body": body, "response": response,
                           "media": media, "auth": auth, "status": status,
                           "replay_status": replay_status, "tag": tag,
                           "params": params or []}
        return fn
    return mark


def query_param(name: str, description: str, *, type_: str = "integer",
                minimum: float | None = 0, maximum: float | None = None,
                **schema: Any) -> dict[str, Any]:
    """An OpenAPI query parameter, with the bounds the handler enforces."""
    body: dict[str, Any] = {"type": type_, **schema}
    if type_ in ("integer", "number"):
        if minimum is not None:
            body["minimum"] = minimum
        body["maximum"] = BIGINT_MAX if maximum is None and type_ == "integer" else maximum
        if body["maximum"] is None:
            del body["maximum"]
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": body}


def header_param(name: str, description: str, **schema: Any) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": False, "description": description,
            "schema": {"type": "string", **schema}}

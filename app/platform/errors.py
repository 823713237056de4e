"""Errors as RFC 9457 problem details (``application/problem+json``).

Domain code raises :class:`Problem`; the handlers registered in ``app.main``
turn it, Starlette's HTTPException, validation errors and anything unexpected
into a problem body whose ``detail`` tells the client what to fix.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from app.platform import fastjson

log = logging.getLogger("mesh.errors")

PROBLEM_JSON = "application/problem+json"


class Problem(Exception):
    def __init__(self, status: int, detail: str, *, title: str | None = None,
                 type_: str = "about:blank", headers: Mapping[str, str] | None = None,
                 **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title or HTTPStatus(status).phrase
        self.type = type_
        self.headers = dict(headers or {})
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"type": self.type, "title": self.title, "status": self.status,
                "detail": self.detail, **self.extra}


def bad_request(detail: str, **extra: Any) -> Problem:
    return Problem(400, detail, **extra)


def unauthorized(detail: str) -> Problem:
    return Problem(401, detail, headers={"WWW-Authenticate": "Bearer"})


def forbidden(detail: str) -> Problem:
    return Problem(403, detail)


def not_found(detail: str) -> Problem:
    return Problem(404, detail)


def conflict(detail: str, **extra: Any) -> Problem:
    return Problem(409, detail, **extra)


def problem_response(problem: Problem) -> Response:
    return Response(fastjson.dumps(problem.body()), status_code=problem.status,
                    headers=problem.headers, media_type=PROBLEM_JSON)


def validation_problem(exc: ValidationError) -> Problem:
    errors = []
    for err in exc.errors(include_url=False, include_context=False, include_input=False):
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        errors.append({"field": loc, "message": err["msg"]})
    summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
    return Problem(422, f"invalid request: {summary}", errors=errors)


async def handle_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return problem_response(exc)


async def handle_validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ValidationError)
    return problem_response(validation_problem(exc))


async def handle_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    detail = exc.detail
    if exc.status_code == 404 and detail == HTTPStatus(404).phrase:
        detail = f"no route for {request.method} {request.url.path}"
    elif exc.status_code == 405:
        detail = f"method {request.method} is not allowed on {request.url.path}"
    elif exc.status_code == 413:
        # A body without Content-Length is cut off while it streams in: Starlette
        # raises its 413 from request.body(), which lands here, not in the
        # middleware that words the up-front case. Say the same thing.
        limit = request.scope.get("starlette.max_body_size")
        if isinstance(limit, int):
            return problem_response(Problem(
                413, f"request body exceeds the limit of {limit} bytes", limit_bytes=limit))
        detail = "request body exceeds the size limit"
    return problem_response(Problem(exc.status_code, str(detail), headers=exc.headers))


# nginx's "client closed request": the client hung up before we could answer. Its
# own status label, so a client that leaves mid-body is not counted as our 5xx.
CLIENT_CLOSED_REQUEST = 499


async def handle_disconnect(request: Request, exc: Exception) -> Response:
    """The client disconnected while its body was read: nothing was applied and
    nobody is left to answer. Debug, not an error: anyone can do it, at will."""
    log.debug("client disconnected before its request body was read: %s %s",
              request.method, request.url.path)
    return Response(status_code=CLIENT_CLOSED_REQUEST)


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem_response(Problem(500, "internal error; the request was not applied "
                                         "and may be retried"))


async def unexpected_response(request: Request, exc: Exception) -> Response:
    """As :func:`handle_unexpected`, for handlers that take a class of errors and
    find one is not theirs (logged with its traceback, as there)."""
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(Problem(500, "internal error; the request was not applied "
                                         "and may be retried"))


def _no_constants(name: str) -> Any:
    # json.loads accepts NaN and ±Infinity by default; JSON (and jsonb) does not.
    raise ValueError(f"{name} is not a JSON value")


def parse_json_body(raw: bytes) -> Any:
    if not raw:
        raise bad_request("request body is empty; send a JSON object")
    try:
        return fastjson.loads(raw, parse_constant=_no_constants)
    except RecursionError:
        raise bad_request("request body is nested too deeply to parse") from None
    except UnicodeDecodeError as exc:
        # Not the codec's own words: they name interpreter internals.
        raise bad_request(f"request body is not valid UTF-8 (invalid byte at offset "
                          f"{exc.start}); send JSON in UTF-8") from None
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise bad_request(f"request body is not valid JSON: {exc}") from exc

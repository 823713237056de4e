"""Reading what a request sends: JSON bodies, ids, query numbers — each refused
with a 4xx that names the field, before anything reaches Postgres."""

from __future__ import annotations

import math
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from app.domain.ids import is_valid_id
from app.platform.errors import Problem, bad_request, parse_json_body, validation_problem

M = TypeVar("M", bound=BaseModel)
BIGINT_MAX = 2**63 - 1  # seqs are Postgres bigints


# Deeper JSON than this is refused before validation (no real request needs it,
# and every layer below — pydantic, the jsonb encoder, Postgres — recurses).
MAX_JSON_DEPTH = 64


def _unstorable(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which cannot be stored; remove it"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate (not valid Unicode); send valid UTF-8"
    return None


def check_storable(data: Any) -> None:
    """Refuse what Postgres cannot store — NUL characters and lone surrogates in
    text and jsonb, non-finite numbers in jsonb — with a 422 naming the field,
    instead of a 500 from the database. Iterative, so depth cannot crash it."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise bad_request(f"request body is nested too deeply (more than {MAX_JSON_DEPTH} "
                              f"levels, at '{where}')")
        items: Any = ()
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        elif isinstance(value, str):
            why = _unstorable(value)
            if why:
                _refuse(where or "body", why)
        elif isinstance(value, float) and not math.isfinite(value):
            _refuse(where or "body", "is not a finite number")
        for key, item in items:
            field = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and (why := _unstorable(key)):
                _refuse(field, f"key {why}")
            stack.append((item, field, depth + 1))


def _refuse(field: str, why: str) -> None:
    raise Problem(422, f"invalid request: {field}: {why}",
                  errors=[{"field": field, "message": why}])


def check_path_params(request: Request) -> None:
    for name, value in request.path_params.items():
        if isinstance(value, str) and (why := _unstorable(value)):
            raise Problem(422, f"path parameter '{name}' {why}")


def valid_id(name: str, value: str) -> str:
    """``value`` if it is a well-formed id (app.domain.ids), else a 422 naming ``name``."""
    if not is_valid_id(value):
        raise Problem(422, f"{name} is not a valid id")
    return value


def check_json_content_type(request: Request) -> None:
    """415 for a body declared as something else than JSON (a form post, text);
    a request without a Content-Type is read as JSON, as curl -d sends it."""
    declared = request.headers.get("content-type")
    if declared is None:
        return
    media = declared.split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/")
                                           and media.endswith("+json")):
        raise Problem(415, f"Content-Type must be application/json, got '{declared[:100]}'; "
                           "send the body as JSON with 'Content-Type: application/json'")


async def body(request: Request, model: type[M]) -> M:
    check_json_content_type(request)
    data = parse_json_body(await request.body())
    if not isinstance(data, dict):
        raise bad_request("request body must be a JSON object")
    check_storable(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_problem(exc) from exc


def int_query(request: Request, name: str, *, default: int | None, minimum: int = 0,
              maximum: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Problem(422, f"query parameter '{name}' must be an integer, got '{raw}'") from None
    maximum = BIGINT_MAX if maximum is None else maximum
    if value < minimum or value > maximum:
        bound = f"between {minimum} and {maximum}"
        raise Problem(422, f"query parameter '{name}' must be {bound}, got {value}")
    return value


def float_query(request: Request, name: str, *, default: float, minimum: float,
                maximum: float) -> float:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise Problem(422, f"query parameter '{name}' must be a number, got '{raw}'") from None
    if not minimum <= value <= maximum:
        raise Problem(422, f"query parameter '{name}' must be between {minimum} and {maximum}, "
                           f"got {value}")
    return value


def base_url(request: Request) -> str:
    """The gateway's own URL as the caller reached it, without a trailing slash."""
    return str(request.base_url).rstrip("/")

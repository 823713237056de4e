"""JSON at orjson's speed with the standard library's results (issue 13).

The hot path parses every request body and every jsonb value Postgres hands
back, and encodes every response and jsonb parameter. orjson does that several
times faster than :mod:`json`, but it differs in a few corners, and where it
does, :mod:`json` decides — so what the API accepts, refuses and returns stays
as it was:

- orjson reads an integer past 64 bits as a float (precision lost); a run of 19
  digits anywhere in the text (the shortest such integer) sends it to json;
- what orjson refuses (lone surrogate escapes, NaN, nesting past 1024 levels,
  other encodings) is handed to json, which accepts it or words the refusal as
  before (``json_options`` are its options there);
- encoding: what orjson cannot encode (integers past 64 bits, non-string keys)
  is encoded by json with the options of Starlette's JSONResponse.

The event wire form (app.event_wire) keeps its own encoder: its bytes are a
contract of their own (ADR 014).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_LONG_DIGITS_B = re.compile(rb"[0-9]{19}")
_LONG_DIGITS_S = re.compile(r"[0-9]{19}")


def loads(data: bytes | str, **json_options: Any) -> Any:
    """What ``json.loads(data, **json_options)`` returns or raises."""
    digits = _LONG_DIGITS_B if isinstance(data, bytes) else _LONG_DIGITS_S
    if digits.search(data) is None:  # type: ignore[arg-type]
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data, **json_options)


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON, as Starlette's JSONResponse writes it."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(value, ensure_ascii=False, allow_nan=False, indent=None,
                          separators=(",", ":")).encode()


def dumps_text(value: Any) -> str:
    """:func:`dumps` as text (the form asyncpg's jsonb codec takes)."""
    return dumps(value).decode()

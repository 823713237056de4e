"""JSON at orjson's speed with the standard library's results.

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

The event wire form (app.domain.event_wire) keeps its own encoder: its bytes are a
contract of their own (ADR 014).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# Every digit to "0", everything else to " ": a run of 19 digits is then a plain
# substring search (a regular expression costs more than orjson's whole parse).
_DIGITS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_LONG_RUN = b"0" * 19


def _long_digit_run(data: bytes) -> bool:
    return _LONG_RUN in data.translate(_DIGITS)


def loads(data: bytes | str, **json_options: Any) -> Any:
    """What ``json.loads(data, **json_options)`` returns or raises."""
    try:
        raw = data if isinstance(data, bytes) else data.encode()
    except UnicodeEncodeError:  # a lone surrogate in text: json's to judge
        raw = None
    if raw is not None and not _long_digit_run(raw):
        try:
            return orjson.loads(raw)
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

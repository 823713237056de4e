"""Opaque page cursors: a short text position, URL-safe base64 without padding.

A cursor says where the next page starts; clients pass it back untouched. Each
listing chooses its own position text (an offset, a keyset) and the pattern it
must match; whatever does not decode or match is a 400 asking for a cursor the
server issued, never a 500 from the query it would have fed."""

from __future__ import annotations

import base64
import binascii
import re
from datetime import UTC, datetime

from app.domain import ids
from app.platform.errors import Problem, bad_request


def pack(position: str) -> str:
    return base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")


def unpack(cursor: str, pattern: re.Pattern[str]) -> re.Match[str]:
    """The match of ``pattern`` over the whole decoded ``cursor``, else a 400."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, binascii.Error) as exc:  # UnicodeDecodeError is a ValueError
        raise invalid() from exc
    match = pattern.fullmatch(raw)
    if match is None:
        raise invalid()
    return match


def invalid() -> Problem:
    return bad_request("invalid cursor; pass the next_cursor of a previous page")


# --- keysets over (time, id): lists newest first by a timestamp and an id -------

_KEYSET = re.compile(r"(?P<stamp>[^|]+)\|(?P<key>.+)")


def keyset(stamp: datetime, key: str) -> str:
    """The cursor after the row (``stamp``, ``key``): the next page starts strictly
    after it, so rows written meanwhile never shift a page."""
    return pack(f"{stamp.isoformat()}|{key}")


def unkeyset(cursor: str) -> tuple[datetime, str]:
    match = unpack(cursor, _KEYSET)
    key = match["key"]
    try:
        if not ids.is_valid_id(key):
            raise ValueError("not an id")
        when = datetime.fromisoformat(match["stamp"])
        # The driver converts to UTC: a time near year 1 or 9999 with an offset
        # would overflow there (a 500), so the range is checked here.
        when.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise invalid() from exc
    return when, key

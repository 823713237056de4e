"""Keyset cursors over (time, id): opaque, URL-safe, validated on the way in.

One form for every list ordered newest first by a timestamp and a tie-breaking
id (tasks, runs): a page's ``next_cursor`` names its last row, and the next page
starts strictly after it, so rows written meanwhile never shift a page.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime

from app import ids
from app.errors import bad_request


def encode(stamp: datetime, key: str) -> str:
    """base64url without padding: an ISO time's '+' would turn into a space when a
    cursor is pasted into a query string unescaped."""
    raw = f"{stamp.isoformat()}|{key}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, key = raw.split("|", 1)
        if not ids.is_valid_id(key):
            raise ValueError("not an id")
        when = datetime.fromisoformat(stamp)
        # The driver converts to UTC: a time near year 1 or 9999 with an offset
        # would overflow there (a 500), so the range is checked here.
        when.astimezone(UTC)
        return when, key
    except (ValueError, OverflowError, binascii.Error) as exc:
        raise bad_request("invalid cursor; pass the next_cursor of a previous page") from exc

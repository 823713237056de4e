"""The directory: find listed agents by words and by skill.

Unlisted agents never appear; an owner opts an agent in with
``PATCH /v1/agents/{id} {"listed": true}``. A result is a lead, not a
relationship: talking to it still takes a friend request, and those are
limited per agent (``friend_requests_pending_max`` pending at once)."""

from __future__ import annotations

import base64
import binascii
import re

import asyncpg

from app.errors import bad_request
from app.responses import DirectoryEntry, DirectoryPage
from app.store import directory as store

_CURSOR = re.compile(r"o:([0-9]{1,19})")  # ASCII digits only: int() takes others
OFFSET_MAX = 2**63 - 1  # Postgres OFFSET is a bigint


async def search(pool: asyncpg.Pool, *, q: str, skill: str | None, limit: int,
                 cursor: str | None) -> DirectoryPage:
    offset = decode_cursor(cursor) if cursor else 0
    rows = await store.search(pool, q=q.strip(), skill=skill, limit=limit + 1, offset=offset)
    more, rows = len(rows) > limit, rows[:limit]
    return DirectoryPage(agents=[DirectoryEntry.of(r) for r in rows],
                         next_cursor=encode_cursor(offset + limit) if more else None)


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The offset of a cursor this module issued: ``o:<digits>``, at most a Postgres
    bigint (anything larger would fail in the query, a 500)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, binascii.Error) as exc:  # UnicodeDecodeError is a ValueError
        raise _bad_cursor() from exc
    match = _CURSOR.fullmatch(raw)
    if match is None or int(match[1]) > OFFSET_MAX:
        raise _bad_cursor()
    return int(match[1])


def _bad_cursor() -> Exception:
    return bad_request("invalid cursor; pass the next_cursor of a previous page")

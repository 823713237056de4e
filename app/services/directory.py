"""The directory: find listed agents by words and by skill (DESIGN §4, issue 11).

Unlisted agents never appear; an owner opts an agent in with
``PATCH /v1/agents/{id} {"listed": true}``. A result is a lead, not a
relationship: talking to it still takes a friend request, and those are
limited per agent (``friend_requests_pending_max`` pending at once)."""

from __future__ import annotations

import base64
import binascii

import asyncpg

from app.errors import bad_request
from app.responses import DirectoryEntry, DirectoryPage
from app.store import directory as store


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
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, offset = raw.split(":", 1)
        if tag != "o" or int(offset) < 0:
            raise ValueError(raw)
        return int(offset)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise bad_request("invalid cursor; pass the next_cursor of a previous page") from exc

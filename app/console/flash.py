"""One-time secrets for the page after a form: post/redirect/get without losing the secret.

A form that creates a secret (an API key, a webhook signing secret) stores it
here and redirects to a page naming only a random flash id. The first GET of
that page takes the secret out (GETDEL: read and deleted in one step), so a
reload, a second tab or the history finds it gone and says so; nothing is
created again. The Redis key includes the session's token hash: another
session, even the same owner's, cannot read it. It expires on its own if the
page is never opened.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

import redis.asyncio as aioredis

TTL_SECONDS = 300
_PREFIX = "console:flash:"


def _key(session_token: str, flash_id: str) -> str:
    return f"{_PREFIX}{hashlib.sha256(session_token.encode()).hexdigest()}:{flash_id}"


async def put(redis: aioredis.Redis, session_token: str, value: dict[str, Any]) -> str:
    flash_id = secrets.token_urlsafe(12)
    await redis.set(_key(session_token, flash_id), json.dumps(value), ex=TTL_SECONDS)
    return flash_id


async def take(redis: aioredis.Redis, session_token: str, flash_id: str | None) -> dict[str, Any] | None:
    """The value stored under ``flash_id``, once; ``None`` ever after."""
    if not flash_id or len(flash_id) > 64:
        return None
    raw = await redis.getdel(_key(session_token, flash_id))
    return None if raw is None else json.loads(raw)  # type: ignore[no-any-return]

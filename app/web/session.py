"""Console sessions: an opaque cookie naming a server-side session in Redis.

The cookie holds a random token and nothing else (HttpOnly, SameSite=Strict,
Secure behind TLS). Redis holds the owner's id and the session's CSRF token
under the token's SHA-256, so a leaked Redis dump does not hand out cookies.
Signing out deletes the key: the old cookie is refused at once (ADR 018).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass

import redis.asyncio as aioredis

COOKIE = "mesh_console"
# Double-submit cookie for the forms shown before there is a session (sign in, register).
PRE_COOKIE = "mesh_console_pre"
_PREFIX = "console:session:"


@dataclass(frozen=True)
class Session:
    token: str
    user_id: int
    csrf: str


def _key(token: str) -> str:
    return _PREFIX + hashlib.sha256(token.encode()).hexdigest()


async def create(redis: aioredis.Redis, user_id: int, ttl: int) -> Session:
    session = Session(secrets.token_urlsafe(32), user_id, secrets.token_urlsafe(32))
    await redis.set(_key(session.token), json.dumps({"user_id": user_id, "csrf": session.csrf}),
                    ex=ttl)
    return session


async def load(redis: aioredis.Redis, token: str | None, ttl: int) -> Session | None:
    """The live session behind a cookie; each use extends it (an idle lifetime)."""
    if not token or len(token) > 128:
        return None
    key = _key(token)
    raw = await redis.get(key)
    if raw is None:
        return None
    await redis.expire(key, ttl)
    data = json.loads(raw)
    return Session(token, int(data["user_id"]), str(data["csrf"]))


async def delete(redis: aioredis.Redis, token: str) -> None:
    await redis.delete(_key(token))


def cookie_args(secure: bool) -> dict[str, object]:
    return {"httponly": True, "samesite": "strict", "secure": secure, "path": "/console"}

"""The OAuth tokens of remote MCP clients (ADR 040): the token endpoint, where a code
with its PKCE verifier, or a refresh token, is exchanged for an access token bound
to one agent and to the ``/mcp`` resource; and the check of such a token on every
call. The clients and the owner's consent that gives the code are app/services/oauth.py.
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import jwt
from authlib.common.security import generate_token
from authlib.oauth2.rfc7636 import create_s256_code_challenge

from app.platform.settings import Settings
from app.services.mesh import Mesh
from app.services.oauth import SCOPE, OAuthError, client, digest, same_redirect
from app.services.principals import Agent
from app.store import oauth as store

TOKEN_TYPE = "oauth"
_VERIFIER = re.compile(r"[A-Za-z0-9\-._~]{43,128}")


def _access_token(settings: Settings, grant_id: str, agent_id: str, client_id: str,
                  resource: str) -> str:
    now = int(time.time())
    claims = {"iss": settings.jwt_issuer, "sub": agent_id, "typ": TOKEN_TYPE, "gid": grant_id,
              "cid": client_id, "aud": resource, "scope": SCOPE, "iat": now,
              "exp": now + settings.oauth_access_token_ttl_seconds, "jti": secrets.token_hex(8)}
    return jwt.encode(claims, settings.jwt_secret, algorithm="HS256")


def _tokens(settings: Settings, grant_id: str, agent_id: str, client_id: str, resource: str,
            refresh: str) -> dict[str, Any]:
    return {"access_token": _access_token(settings, grant_id, agent_id, client_id, resource),
            "token_type": "Bearer", "expires_in": settings.oauth_access_token_ttl_seconds,
            "refresh_token": refresh, "scope": SCOPE}


def _refresh_expiry(settings: Settings) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=settings.oauth_refresh_token_ttl_seconds)


async def token(mesh: Mesh, form: Mapping[str, str], *, resource: str) -> dict[str, Any]:
    grant_type = form.get("grant_type", "")
    if grant_type == "authorization_code":
        return await _exchange_code(mesh.pool, mesh.settings, form, resource)
    if grant_type == "refresh_token":
        return await _refresh(mesh.pool, mesh.settings, form, resource)
    raise OAuthError("unsupported_grant_type",
                     "grant_type must be 'authorization_code' or 'refresh_token'")


async def _exchange_code(pool: asyncpg.Pool, settings: Settings, form: Mapping[str, str],
                         resource: str) -> dict[str, Any]:
    client_id = form.get("client_id", "")
    await client(pool, settings, client_id, fetch=False)
    verifier = form.get("code_verifier", "")
    if not _VERIFIER.fullmatch(verifier):
        raise OAuthError("invalid_request", "code_verifier is missing or malformed (43-128 characters "
                                            "of A-Z a-z 0-9 - . _ ~)")
    code_hash = digest(form.get("code", ""))
    # Spent by the first attempt, right or wrong: a code is presented once.
    row, replayed = await store.spend_code(pool, code_hash)
    if row is None:
        if replayed is not None:  # RFC 6749 §4.1.2: a code used twice ends its grant
            await store.revoke_grant(pool, replayed)
        raise OAuthError("invalid_grant", "the code is unknown, expired or already used")
    if row["client_id"] != client_id:
        raise OAuthError("invalid_grant", "the code was issued to another client")
    if not same_redirect(row["redirect_uri"], form.get("redirect_uri") or row["redirect_uri"]):
        raise OAuthError("invalid_grant", "redirect_uri differs from the authorization request's")
    if not hmac.compare_digest(create_s256_code_challenge(verifier), row["code_challenge"]):
        raise OAuthError("invalid_grant", "code_verifier does not match the code_challenge")
    asked = form.get("resource") or row["resource"]
    if asked.rstrip("/") != row["resource"] or row["resource"] != resource:
        raise OAuthError("invalid_target", f"the code is for the resource '{row['resource']}'")
    grant_id, refresh = "og_" + generate_token(24), "mr_" + generate_token(48)
    async with pool.acquire() as conn, conn.transaction():
        await store.add_grant(conn, grant_id=grant_id, client_id=client_id,
                              agent_id=row["agent_id"], owner_id=row["owner_id"],
                              resource=row["resource"], scope=row["scope"],
                              refresh_hash=digest(refresh), refresh_expires_at=_refresh_expiry(settings),
                              code_hash=code_hash)
    return _tokens(settings, grant_id, row["agent_id"], client_id, row["resource"], refresh)


async def _refresh(pool: asyncpg.Pool, settings: Settings, form: Mapping[str, str],
                   resource: str) -> dict[str, Any]:
    """Refresh tokens rotate (OAuth 2.1 §4.3.1 for public clients): each use returns a
    new one; presenting a replaced one means it leaked, and ends the grant."""
    old = form.get("refresh_token", "")
    refresh = "mr_" + generate_token(48)
    row = await store.rotate_refresh(pool, digest(old), digest(refresh), _refresh_expiry(settings))
    if row is None:
        await store.revoke_by_previous_refresh(pool, digest(old))
        raise OAuthError("invalid_grant", "the refresh token is unknown, expired, replaced or revoked; "
                                          "authorize again")
    if form.get("client_id") and form["client_id"] != row["client_id"]:
        raise OAuthError("invalid_grant", "the refresh token was issued to another client")
    if row["resource"] != resource:
        raise OAuthError("invalid_target", f"the grant is for the resource '{row['resource']}'")
    return _tokens(settings, row["grant_id"], row["agent_id"], row["client_id"], row["resource"], refresh)


def looks_like_access_token(token: str) -> bool:
    try:
        return jwt.decode(token, options={"verify_signature": False}).get("typ") == TOKEN_TYPE
    except jwt.InvalidTokenError:
        return False


class InvalidAccessToken(Exception):
    pass


async def verify(pool: asyncpg.Pool, settings: Settings, token: str, *, resource: str) -> Agent:
    """The agent an OAuth access token acts as: signed here, for this resource, not
    expired, and its grant still live (not revoked, the agent not deleted)."""
    try:
        claims = jwt.decode(token, settings.jwt_secret, algorithms=["HS256"], audience=resource,
                            issuer=settings.jwt_issuer,
                            options={"require": ["exp", "sub", "typ", "gid", "aud"]})
    except jwt.ExpiredSignatureError as exc:
        raise InvalidAccessToken("the access token expired; refresh it at /oauth/token") from exc
    except jwt.InvalidTokenError as exc:
        raise InvalidAccessToken(f"invalid access token: {exc}") from exc
    row = await store.live_grant(pool, str(claims["gid"]), str(claims["sub"]))
    if row is None:
        raise InvalidAccessToken("the grant behind this token was revoked or its agent deleted; "
                                 "authorize again")
    return Agent(row["agent_id"], row["owner_id"], row["kind"], None,
                 expires_at=float(claims["exp"]), grant_id=row["grant_id"])

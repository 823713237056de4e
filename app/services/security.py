"""Passwords (argon2), API keys (shown once, only a hash stored) and JWTs."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any, Literal

import jwt
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerifyMismatchError

from app.platform.settings import Settings

_hasher = PasswordHasher()
# A valid hash to verify against when the user does not exist, so a login for
# an unknown name costs the same time as one with a wrong password.
_DUMMY_HASH = _hasher.hash("not-a-real-password")


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    try:
        return _hasher.verify(password_hash or _DUMMY_HASH, password) and password_hash is not None
    except (VerifyMismatchError, InvalidHashError):
        return False


# --- API keys ---------------------------------------------------------------
# Format: mk_<key_id>_<secret>. The key_id lets us find the row without a scan;
# the secret has 256 bits of entropy, so a fast SHA-256 is the right hash (a
# slow KDF only matters for low-entropy passwords) and keeps token exchange cheap.

@dataclass(frozen=True)
class NewApiKey:
    key_id: str
    api_key: str
    key_hash: str


def new_api_key() -> NewApiKey:
    key_id = "k" + secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    api_key = f"mk_{key_id}_{secret}"
    return NewApiKey(key_id, api_key, hash_api_key(api_key))


def hash_api_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def parse_api_key(api_key: str) -> str | None:
    """Return the key_id of a well-formed key, else None."""
    parts = api_key.split("_", 2)
    if len(parts) != 3 or parts[0] != "mk" or not parts[1] or not parts[2]:
        return None
    return parts[1]


# --- JWT ----------------------------------------------------------------------

TokenKind = Literal["owner", "agent"]


def issue_token(settings: Settings, kind: TokenKind, subject: str, *,
                key_id: str | None = None) -> tuple[str, int]:
    ttl = settings.owner_token_ttl_seconds if kind == "owner" else settings.agent_token_ttl_seconds
    now = int(time.time())
    claims: dict[str, Any] = {"sub": subject, "typ": kind, "iat": now, "exp": now + ttl,
                              "iss": settings.jwt_issuer, "jti": secrets.token_hex(8)}
    if key_id is not None:
        claims["kid"] = key_id
    return jwt.encode(claims, settings.jwt_secret, algorithm="HS256"), ttl


class TokenError(Exception):
    pass


def decode_token(settings: Settings, token: str) -> dict[str, Any]:
    try:
        return jwt.decode(token, settings.jwt_secret, algorithms=["HS256"],
                          issuer=settings.jwt_issuer, options={"require": ["exp", "sub", "typ"]})
    except jwt.ExpiredSignatureError as exc:
        raise TokenError("token expired; get a new one from POST /v1/auth/token "
                         "(agents) or POST /v1/auth/login (owners)") from exc
    except jwt.InvalidTokenError as exc:
        raise TokenError(f"invalid token: {exc}") from exc

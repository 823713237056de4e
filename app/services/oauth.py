"""OAuth 2.1 for remote MCP clients (ADR 040): clients, the owner's consent, codes with
PKCE, access and refresh tokens bound to one agent and to the ``/mcp`` resource.

Public clients only (``token_endpoint_auth_method: none``): a hosted connector or a
CLI cannot keep a secret, PKCE S256 is what binds a code to the client that asked.
authlib supplies the protocol's pieces (S256, token generation, the RFC 7591 and RFC
8414 metadata checks); the state lives in Postgres (app/store/oauth.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

import asyncpg
import httpx
import jwt
from authlib.common.security import generate_token
from authlib.oauth2.rfc7591 import ClientMetadataClaims
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc.errors import JoseError  # what authlib's claim checks raise

from app.platform import webhook_target
from app.platform.errors import not_found
from app.platform.settings import Settings
from app.services import accounts
from app.services.mesh import Mesh
from app.services.principals import Agent, Owner
from app.store import oauth as store

SCOPE = "mcp"
RESOURCE_PATH = "/mcp"  # the one resource tokens are issued for: the remote MCP endpoint
TOKEN_TYPE = "oauth"
_VERIFIER = re.compile(r"[A-Za-z0-9\-._~]{43,128}")
_FORBIDDEN_SCHEMES = {"javascript", "data", "file", "vbscript", "about", "blob"}
# A metadata document larger than this is refused (they are a few hundred bytes).
MAX_DOCUMENT_BYTES = 16 * 1024


class OAuthError(Exception):
    """An RFC 6749 error: ``error`` code and a description that says what to fix.
    ``redirect``: the request whose client and redirect URI were checked, so the
    error goes back to the client by redirect rather than being shown to the user."""

    def __init__(self, error: str, description: str, *, status: int = 400,
                 redirect: Authorization | None = None) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status
        self.redirect = redirect

    def body(self) -> dict[str, str]:
        return {"error": self.error, "error_description": self.description}


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


# --- clients -------------------------------------------------------------------------

def _redirect_ok(uri: str) -> bool:
    try:
        parts = urlsplit(uri)
    except ValueError:
        return False
    if parts.fragment or not parts.scheme or parts.scheme.lower() in _FORBIDDEN_SCHEMES:
        return False
    if parts.scheme == "https":
        return bool(parts.netloc)
    if parts.scheme == "http":  # only to the user's own machine (RFC 8252 §7.3)
        return (parts.hostname or "") in {"127.0.0.1", "::1", "localhost"}
    return True  # a native app's private-use scheme (RFC 8252 §7.1)


def _same_redirect(registered: str, given: str) -> bool:
    """Exact match, except that a loopback redirect may use any port (RFC 8252 §7.3)."""
    if registered == given:
        return True
    a, b = urlsplit(registered), urlsplit(given)
    return (a.scheme == b.scheme == "http" and a.hostname is not None and a.hostname == b.hostname
            and a.hostname in {"127.0.0.1", "::1", "localhost"}
            and (a.path, a.query) == (b.path, b.query))


def _check_metadata(meta: Mapping[str, Any], *, what: str) -> list[str]:
    """The redirect URIs of client metadata that passes RFC 7591's checks and ours."""
    uris = meta.get("redirect_uris")
    if not isinstance(uris, list) or not uris or not all(isinstance(u, str) for u in uris):
        raise OAuthError("invalid_redirect_uri", f"{what}: redirect_uris must be a non-empty list of URIs")
    bad = [u for u in uris if not _redirect_ok(u)]
    if bad:
        raise OAuthError("invalid_redirect_uri",
                         f"{what}: redirect URI '{bad[0][:200]}' is not allowed: use https, http on "
                         "a loopback address (127.0.0.1, [::1], localhost), or an app's private scheme; "
                         "no fragment")
    method = meta.get("token_endpoint_auth_method", "none")
    if method != "none":
        raise OAuthError("invalid_client_metadata",
                         f"{what}: token_endpoint_auth_method '{method}' is not supported; this "
                         "server has public clients only ('none', with PKCE)")
    try:
        ClientMetadataClaims(dict(meta), {}).validate()
    except JoseError as exc:
        raise OAuthError("invalid_client_metadata", f"{what}: {exc.description or exc}") from exc
    return list(uris)


async def register(mesh: Mesh, meta: Any) -> dict[str, Any]:
    """RFC 7591 dynamic registration: a public client with its redirect URIs."""
    if not isinstance(meta, dict):
        raise OAuthError("invalid_client_metadata", "the body must be a JSON object of client metadata")
    uris = _check_metadata(meta, what="client metadata")
    grant_types = meta.get("grant_types") or ["authorization_code", "refresh_token"]
    if not set(grant_types) <= {"authorization_code", "refresh_token"}:
        raise OAuthError("invalid_client_metadata",
                         "grant_types may hold only 'authorization_code' and 'refresh_token'")
    name = str(meta.get("client_name") or "")[:200]
    client_uri = meta.get("client_uri") if isinstance(meta.get("client_uri"), str) else None
    client_id = "mc_" + generate_token(32)
    row = await store.put_client(mesh.pool, client_id=client_id, kind="registered",
                                 client_name=name, client_uri=client_uri, redirect_uris=uris,
                                 metadata={k: v for k, v in meta.items() if k != "client_secret"},
                                 fetched=False)
    return {"client_id": client_id, "client_id_issued_at": int(row["created_at"].timestamp()),
            "client_name": name, "redirect_uris": uris, "grant_types": list(grant_types),
            "response_types": ["code"], "token_endpoint_auth_method": "none", "scope": SCOPE}


def is_document_url(client_id: str) -> bool:
    return client_id.startswith(("https://", "http://"))


async def _fetch_document(settings: Settings, url: str) -> dict[str, Any]:
    """A client metadata document (CIMD): fetched from its own URL, which it must name."""
    parts = urlsplit(url)
    allow_private = settings.oauth_client_fetch_allow_private
    if parts.scheme != "https" and not allow_private:
        raise OAuthError("invalid_client", "a client id that is a URL must be https")
    if not parts.path or parts.path == "/" or parts.fragment or parts.username:
        raise OAuthError("invalid_client", "a client id URL needs a path and no fragment or userinfo")
    try:
        await webhook_target.check(url, allow_private=allow_private)
    except webhook_target.TargetRefused as exc:
        raise OAuthError("invalid_client", f"the client's metadata URL is refused: {exc}") from exc
    try:
        async with httpx.AsyncClient(timeout=5.0, follow_redirects=False) as http, \
                http.stream("GET", url, headers={"Accept": "application/json"}) as resp:
            if resp.status_code != 200:
                raise OAuthError("invalid_client",
                                 f"the client's metadata document answered {resp.status_code}")
            raw = b""
            async for chunk in resp.aiter_bytes():
                raw += chunk
                if len(raw) > MAX_DOCUMENT_BYTES:
                    raise OAuthError("invalid_client", "the client's metadata document is too large")
    except httpx.HTTPError as exc:
        raise OAuthError("invalid_client",
                         f"the client's metadata document could not be fetched ({exc})") from exc
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise OAuthError("invalid_client", "the client's metadata document is not JSON") from exc
    if not isinstance(doc, dict) or doc.get("client_id") != url:
        raise OAuthError("invalid_client",
                         "the client's metadata document must name its own URL as client_id")
    if "client_secret" in doc:
        raise OAuthError("invalid_client", "a client metadata document must not hold a client_secret")
    return doc


async def client(pool: asyncpg.Pool, settings: Settings, client_id: str, *,
                 fetch: bool) -> asyncpg.Record:
    """The client a ``client_id`` names; a metadata-document client is fetched (again)
    when ``fetch`` (at authorization), else its stored copy is used (at the token endpoint)."""
    if not client_id or len(client_id) > 2000:
        raise OAuthError("invalid_client", "client_id is missing or too long")
    if is_document_url(client_id):
        row = await store.client(pool, client_id)
        if fetch or row is None:
            doc = await _fetch_document(settings, client_id)
            uris = _check_metadata(doc, what="the client's metadata document")
            row = await store.put_client(
                pool, client_id=client_id, kind="metadata-document",
                client_name=str(doc.get("client_name") or "")[:200],
                client_uri=doc.get("client_uri") if isinstance(doc.get("client_uri"), str) else None,
                redirect_uris=uris, metadata=doc, fetched=True)
        return row
    row = await store.client(pool, client_id)
    if row is None:
        raise OAuthError("invalid_client", f"unknown client_id '{client_id[:100]}': register at "
                                           "/oauth/register or use a metadata document URL", status=401)
    return row


# --- authorization -----------------------------------------------------------------

@dataclass(frozen=True)
class Authorization:
    """A checked authorization request, as the consent page shows and posts it back."""
    client_id: str
    client_name: str
    redirect_uri: str
    state: str | None
    code_challenge: str
    resource: str
    scope: str

    def params(self) -> dict[str, str]:
        out = {"response_type": "code", "client_id": self.client_id, "redirect_uri": self.redirect_uri,
               "code_challenge": self.code_challenge, "code_challenge_method": "S256",
               "resource": self.resource, "scope": self.scope}
        if self.state is not None:
            out["state"] = self.state
        return out


async def check_authorization(pool: asyncpg.Pool, settings: Settings, params: Mapping[str, str],
                              *, resource: str, fetch: bool) -> Authorization:
    """RFC 6749 §4.1.1 with PKCE and RFC 8707 resource: errors before the redirect URI
    is known are shown to the user; after it, they go back to the client."""
    row = await client(pool, settings, params.get("client_id", ""), fetch=fetch)
    registered: list[str] = list(row["redirect_uris"])
    redirect_uri = params.get("redirect_uri") or (registered[0] if len(registered) == 1 else "")
    if not any(_same_redirect(r, redirect_uri) for r in registered):
        raise OAuthError("invalid_request", "redirect_uri is missing or is not one the client registered")

    challenge = params.get("code_challenge", "")
    auth = Authorization(client_id=row["client_id"], client_name=row["client_name"] or row["client_id"],
                         redirect_uri=redirect_uri, state=params.get("state"), code_challenge=challenge,
                         resource=resource, scope=SCOPE)

    def bad(error: str, description: str) -> OAuthError:
        return OAuthError(error, description, redirect=auth)

    if params.get("response_type") != "code":
        raise bad("unsupported_response_type", "response_type must be 'code'")
    if not challenge or params.get("code_challenge_method") != "S256" or len(challenge) > 128:
        raise bad("invalid_request", "PKCE is required: send code_challenge with code_challenge_method=S256")
    asked = params.get("resource") or resource
    if asked.rstrip("/") != resource:
        raise bad("invalid_target", f"resource must be '{resource}', the only one this server protects")
    return auth


def redirect_url(auth: Authorization, issuer: str, **params: str) -> str:
    query = {**params, "iss": issuer}  # RFC 9207: the client checks who answered
    if auth.state is not None:
        query["state"] = auth.state
    sep = "&" if "?" in auth.redirect_uri else "?"
    return f"{auth.redirect_uri}{sep}{urlencode(query)}"


def error_redirect(auth: Authorization, issuer: str, e: OAuthError) -> str:
    return redirect_url(auth, issuer, error=e.error, error_description=e.description)


async def approve(mesh: Mesh, owner: Owner, auth: Authorization, agent_id: str) -> str:
    """The owner chose ``agent_id`` (one of theirs): a code for the client."""
    agent = await accounts.owned_agent(mesh.pool, owner, agent_id)
    code = generate_token(48)
    ttl = mesh.settings.oauth_code_ttl_seconds
    await store.add_code(mesh.pool, code_hash=_sha(code), client_id=auth.client_id,
                         agent_id=agent["agent_id"], owner_id=owner.user_id,
                         redirect_uri=auth.redirect_uri, code_challenge=auth.code_challenge,
                         resource=auth.resource, scope=auth.scope,
                         expires_at=datetime.now(UTC) + timedelta(seconds=ttl))
    return code


# --- tokens ----------------------------------------------------------------------------

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
    code_hash = _sha(form.get("code", ""))
    # Spent by the first attempt, right or wrong: a code is presented once.
    row, replayed = await store.spend_code(pool, code_hash)
    if row is None:
        if replayed is not None:  # RFC 6749 §4.1.2: a code used twice ends its grant
            await store.revoke_grant(pool, replayed)
        raise OAuthError("invalid_grant", "the code is unknown, expired or already used")
    if row["client_id"] != client_id:
        raise OAuthError("invalid_grant", "the code was issued to another client")
    if not _same_redirect(row["redirect_uri"], form.get("redirect_uri") or row["redirect_uri"]):
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
                              refresh_hash=_sha(refresh), refresh_expires_at=_refresh_expiry(settings),
                              code_hash=code_hash)
    return _tokens(settings, grant_id, row["agent_id"], client_id, row["resource"], refresh)


async def _refresh(pool: asyncpg.Pool, settings: Settings, form: Mapping[str, str],
                   resource: str) -> dict[str, Any]:
    """Refresh tokens rotate (OAuth 2.1 §4.3.1 for public clients): each use returns a
    new one; presenting a replaced one means it leaked, and ends the grant."""
    old = form.get("refresh_token", "")
    refresh = "mr_" + generate_token(48)
    row = await store.rotate_refresh(pool, _sha(old), _sha(refresh), _refresh_expiry(settings))
    if row is None:
        await store.revoke_by_previous_refresh(pool, _sha(old))
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


# --- the owner's view --------------------------------------------------------------------

async def connections(pool: asyncpg.Pool, owner: Owner) -> list[dict[str, Any]]:
    return [dict(r) for r in await store.owner_grants(pool, owner.user_id)]


async def disconnect(mesh: Mesh, owner: Owner, grant_id: str) -> None:
    agent_id = await store.revoke(mesh.pool, grant_id, owner.user_id)
    if agent_id is None:
        raise not_found(f"no connected client '{grant_id}' of yours")
    await mesh.auth_changed(agent_id)

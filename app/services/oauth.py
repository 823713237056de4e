"""OAuth 2.1 for remote MCP clients (ADR 040): the clients, the owner's consent that
gives one of them a code with PKCE for one of the owner's agents, and the owner's
view of what is connected. The tokens a code is exchanged for, and their check, are
app/services/oauth_tokens.py.

Public clients only (``token_endpoint_auth_method: none``): a hosted connector or a
CLI cannot keep a secret, PKCE S256 is what binds a code to the client that asked.
authlib supplies the protocol's pieces (token generation, the RFC 7591 and RFC 8414
metadata checks); the state lives in Postgres (app/store/oauth.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

import asyncpg
import httpx
from authlib.common.security import generate_token
from authlib.oauth2.rfc7591 import ClientMetadataClaims
from joserfc.errors import JoseError  # what authlib's claim checks raise

from app.platform import webhook_target
from app.platform.errors import not_found
from app.platform.settings import Settings
from app.services import accounts
from app.services.mesh import Mesh
from app.services.principals import Owner
from app.store import oauth as store

SCOPE = "mcp"
RESOURCE_PATH = "/mcp"  # the one resource tokens are issued for: the remote MCP endpoint
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


def digest(secret: str) -> str:
    """What Postgres keeps of a code or a refresh token: a read of the tables gives
    no secret that could be presented."""
    return hashlib.sha256(secret.encode()).hexdigest()


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


def same_redirect(registered: str, given: str) -> bool:
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
    if not any(same_redirect(r, redirect_uri) for r in registered):
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
    await store.add_code(mesh.pool, code_hash=digest(code), client_id=auth.client_id,
                         agent_id=agent["agent_id"], owner_id=owner.user_id,
                         redirect_uri=auth.redirect_uri, code_challenge=auth.code_challenge,
                         resource=auth.resource, scope=auth.scope,
                         expires_at=datetime.now(UTC) + timedelta(seconds=ttl))
    return code


# --- the owner's view --------------------------------------------------------------------

async def connections(pool: asyncpg.Pool, owner: Owner) -> list[dict[str, Any]]:
    return [dict(r) for r in await store.owner_grants(pool, owner.user_id)]


async def disconnect(mesh: Mesh, owner: Owner, grant_id: str) -> None:
    agent_id = await store.revoke(mesh.pool, grant_id, owner.user_id)
    if agent_id is None:
        raise not_found(f"no connected client '{grant_id}' of yours")
    await mesh.auth_changed(agent_id)

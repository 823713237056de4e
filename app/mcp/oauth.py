"""The OAuth 2.1 endpoints of the gateway as the authorization server of ``/mcp``:
metadata (RFC 8414), dynamic registration (RFC 7591), the authorization endpoint
(which hands the owner to the console to sign in and consent) and the token endpoint.
The logic is app/services/oauth.py and app/services/oauth_tokens.py; this is the
HTTP edge."""

from __future__ import annotations

import html
import json
from typing import Any
from urllib.parse import parse_qsl, urlencode

from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from app.mcp.auth import PATH
from app.platform.errors import Problem
from app.services import oauth, oauth_tokens
from app.services.oauth import OAuthError
from app.web import endpoint, ratelimit
from app.web.auth import client_address
from app.web.inputs import base_url, check_storable
from app.web.state import state

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
CONSENT_PATH = "/console/oauth/authorize"


def resource(request: Request) -> str:
    return base_url(request) + PATH


def _answer(body: dict[str, Any], status: int = 200) -> Response:
    return Response(json.dumps(body), status_code=status, media_type="application/json",
                    headers=NO_STORE)


def _refused(e: OAuthError) -> Response:
    return _answer(e.body(), e.status)


def metadata_document(request: Request) -> dict[str, Any]:
    base = base_url(request)
    doc = {
        "issuer": base,
        "authorization_endpoint": f"{base}/oauth/authorize",
        "token_endpoint": f"{base}/oauth/token",
        "registration_endpoint": f"{base}/oauth/register",
        "scopes_supported": [oauth.SCOPE],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none"],
        "code_challenge_methods_supported": ["S256"],
        "client_id_metadata_document_supported": True,
        "authorization_response_iss_parameter_supported": True,
        "service_documentation": f"{base}/docs",
    }
    AuthorizationServerMetadata(doc).validate()  # the RFC's own checks, so a typo fails tests
    return doc


async def server_metadata(request: Request) -> Response:
    return endpoint.json(metadata_document(request))


async def _throttle(request: Request, template: str) -> None:
    """Unauthenticated endpoints: the rate limit is the caller's address's (a 429
    problem, with Retry-After; MESH_RATELIMIT_ROUTES can tighten these two)."""
    s = state(request)
    if s.ratelimiter is not None:
        await ratelimit.require(s.ratelimiter, f"addr:{client_address(request)}", "POST", template)


async def register(request: Request) -> Response:
    s = state(request)
    await _throttle(request, "/oauth/register")
    try:
        raw = await request.body()
        try:
            meta = json.loads(raw)
        except ValueError:
            raise OAuthError("invalid_client_metadata", "the body must be JSON client metadata") from None
        check_storable(meta)
        return _answer(await oauth.register(s, meta), 201)
    except OAuthError as e:
        return _refused(e)
    except Problem as p:
        return _answer({"error": "invalid_client_metadata", "error_description": p.detail})


async def authorize(request: Request) -> Response:
    """Check the request, then let the console (where the owner's session lives) ask
    the owner which agent the client may act as."""
    s = state(request)
    params = dict(request.query_params)
    try:
        check_storable(params)
        auth = await oauth.check_authorization(s.pool, s.settings, params, resource=resource(request),
                                               fetch=True)
    except Problem as p:
        raise Problem(400, f"invalid authorization request: {p.detail}") from p
    except OAuthError as e:
        if e.redirect is None:  # the client or its redirect URI is unknown: tell the user
            raise Problem(400, f"invalid authorization request ({e.error}): {e.description}") from e
        return RedirectResponse(oauth.error_redirect(e.redirect, base_url(request), e),
                                status_code=303)
    return _hand_over(f"{CONSENT_PATH}?{urlencode(auth.params())}")


def _hand_over(target: str) -> Response:
    """A page that moves on to the console by itself, rather than a redirect: the
    console's session cookie is SameSite=Strict, and a redirect chain that began on
    the client's site would arrive without it (the owner signed out, every time).
    A navigation this page starts is same-site, so the cookie comes along."""
    url = html.escape(target, quote=True)
    page = (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="refresh" content="0;url={url}"><title>Agent Mesh</title>'
            f'<link rel="icon" href="data:,"></head>'
            f'<body><p><a href="{url}">Continue to Agent Mesh</a></p></body></html>')
    return HTMLResponse(page, headers={
        **NO_STORE, "Content-Security-Policy": "default-src 'none'; img-src data:; base-uri 'none'; "
                                                "form-action 'none'; frame-ancestors 'none'",
        "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"})


async def token(request: Request) -> Response:
    s = state(request)
    await _throttle(request, "/oauth/token")
    try:
        declared = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if declared != "application/x-www-form-urlencoded":
            raise OAuthError("invalid_request", "send the token request as "
                                                "application/x-www-form-urlencoded (RFC 6749 §4.1.3)")
        raw = (await request.body()).decode("utf-8", errors="replace")
        form = dict(parse_qsl(raw, keep_blank_values=True))
        check_storable(form)
        return _answer(await oauth_tokens.token(s, form, resource=resource(request)))
    except OAuthError as e:
        return _refused(e)
    except Problem as p:
        return _answer({"error": "invalid_request", "error_description": p.detail})


def routes() -> list[BaseRoute]:
    return [
        Route("/.well-known/oauth-authorization-server", server_metadata, methods=["GET"]),
        Route("/.well-known/oauth-authorization-server" + PATH, server_metadata, methods=["GET"]),
        Route("/oauth/register", register, methods=["POST"]),
        Route("/oauth/authorize", authorize, methods=["GET"]),
        Route("/oauth/token", token, methods=["POST"]),
    ]

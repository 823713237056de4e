"""The owner's side of OAuth for remote MCP clients (ADR 040): the consent page the
gateway's ``/oauth/authorize`` hands the owner to (here, where the console session
lives), and the list of connected clients with a revoke button each."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from app.console import csrf
from app.console.owned import my_agents
from app.console.web import SECURITY_HEADERS, Ctx, action, back, page
from app.platform.errors import Problem
from app.services import oauth
from app.services.oauth import Authorization, OAuthError
from app.web.inputs import base_url

FIELDS = ("response_type", "client_id", "redirect_uri", "code_challenge", "code_challenge_method",
          "resource", "scope", "state")


def _resource(request: Request) -> str:
    return base_url(request) + oauth.RESOURCE_PATH


async def _checked(ctx: Ctx, params: dict[str, str]) -> Authorization | Response:
    """The request checked again (the page and its form can be forged like any URL)."""
    try:
        return await oauth.check_authorization(ctx.state.pool, ctx.state.settings, params,
                                               resource=_resource(ctx.request), fetch=False)
    except OAuthError as e:
        if e.redirect is not None:
            return RedirectResponse(oauth.error_redirect(e.redirect, base_url(ctx.request), e),
                                    status_code=303)
        raise Problem(400, f"invalid authorization request ({e.error}): {e.description}") from e


def _form_action(redirect_uri: str) -> str:
    """The consent form's answer is a redirect to the client: CSP form-action must let
    the browser follow it."""
    parts = urlsplit(redirect_uri)
    target = f"{parts.scheme}://{parts.netloc}" if parts.netloc else f"{parts.scheme}:"
    return SECURITY_HEADERS["Content-Security-Policy"].replace("form-action 'self'",
                                                               f"form-action 'self' {target}")


@page
async def consent(ctx: Ctx) -> Response:
    auth = await _checked(ctx, {k: v for k, v in ctx.query.items() if k in FIELDS})
    if isinstance(auth, Response):
        return auth
    agents = [a for a in await my_agents(ctx)]
    agents.sort(key=lambda a: a.kind == "virtual-user")
    resp = ctx.render("oauth_authorize.html", auth=auth, params=auth.params(), agents=agents,
                      redirect_host=urlsplit(auth.redirect_uri).netloc or auth.redirect_uri)
    resp.headers["Content-Security-Policy"] = _form_action(auth.redirect_uri)
    return resp


@page
async def decide(ctx: Ctx) -> Response:
    csrf.check(ctx.session.csrf, ctx.form, dict(ctx.request.headers))
    auth = await _checked(ctx, {k: v for k, v in ctx.form.items() if k in FIELDS})
    if isinstance(auth, Response):
        return auth
    issuer = base_url(ctx.request)
    if ctx.form.get("decision") != "approve":
        denied = OAuthError("access_denied", "the owner did not allow this client")
        return RedirectResponse(oauth.error_redirect(auth, issuer, denied), status_code=303)
    code = await oauth.approve(ctx.state, ctx.owner, auth,
                               ctx.form.get("agent_id", ""))
    return RedirectResponse(oauth.redirect_url(auth, issuer, code=code), status_code=303)


async def connections_page(ctx: Ctx, *, error: object = None, status: int = 200) -> Response:
    return ctx.render("connections.html", status=status, error=error, nav="connections",
                      connections=await oauth.connections(ctx.state.pool, ctx.owner))


@page
async def connections(ctx: Ctx) -> Response:
    return await connections_page(ctx)


@action("disconnect", connections_page)
async def disconnect(ctx: Ctx) -> Response:
    await oauth.disconnect(ctx.state, ctx.owner, ctx.path("grant_id"))
    return back("/console/connections?revoked=1")

"""Sign in, register, sign out.

Before sign-in there is no session to hold a CSRF token, so these forms use a
double-submit cookie (``mesh_console_pre``): the token is in the cookie and in
the form, and a cross-site page can set neither.
"""

from __future__ import annotations

import hmac
import secrets

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from app.console import csrf
from app.console.web import (
    SECURITY_HEADERS,
    ActionError,
    FormTooLarge,
    read_form,
    signed_in,
    templates,
    validated,
)
from app.domain.schemas import Credentials
from app.platform.errors import Problem, forbidden
from app.services import accounts
from app.web import session as sessions
from app.web.auth import client_address
from app.web.state import state


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _next(raw: str | None) -> str:
    # Only a path inside the console: never an open redirect to another site.
    if raw and raw.startswith("/console") and not raw.startswith("//"):
        return raw
    return "/console/"


def _form_page(request: Request, template: str, *, status: int = 200,
               error: ActionError | None = None, form: dict[str, str] | None = None,
               headers: dict[str, str] | None = None) -> Response:
    pre = request.cookies.get(sessions.PRE_COOKIE) or secrets.token_urlsafe(24)
    s = state(request)
    resp = templates.TemplateResponse(
        request, template, status_code=status,
        context={"me": None, "csrf_token": pre, "error": error, "form": form or {},
                 "next": _next(request.query_params.get("next") or (form or {}).get("next")),
                 "registration": s.settings.registration_enabled},
        headers=SECURITY_HEADERS | (headers or {}))
    resp.set_cookie(sessions.PRE_COOKIE, pre, **sessions.cookie_args(_secure(request)))  # type: ignore[arg-type]
    return resp


def _check_pre(request: Request, form: dict[str, str]) -> None:
    cookie = request.cookies.get(sessions.PRE_COOKIE) or ""
    sent = form.get(csrf.FIELD) or ""
    if not cookie or not hmac.compare_digest(cookie.encode(), sent.encode()):
        raise forbidden("missing or wrong CSRF token: reload the page and submit the form again")


def _problem_page(request: Request, template: str, action: str, problem: Problem,
                  form: dict[str, str]) -> Response:
    """The form again with the problem's detail, and its Retry-After when it has one
    (a throttled sign-in or a busy hasher)."""
    retry = {k: v for k, v in problem.headers.items() if k == "Retry-After"}
    return _form_page(request, template, status=problem.status, form=form, headers=retry,
                      error=ActionError(action, problem.detail, problem.status,
                                        problem.extra.get("errors") or []))


async def _start_session(request: Request, username: str, password: str, target: str) -> Response:
    s = state(request)
    # The API's login, throttle and hasher included: one door, not two (ADR 032).
    token = await accounts.login_at(s.pool, s.settings, username, password,
                                    address=client_address(request), throttle=s.auth_throttle,
                                    kdf=s.kdf)
    owner = await accounts.resolve(s.pool, s.settings, token.access_token)
    ttl = s.settings.console_session_ttl_seconds
    session = await sessions.create(s.redis, owner.user_id, ttl)  # type: ignore[union-attr]
    resp = RedirectResponse(target, status_code=303)
    resp.set_cookie(sessions.COOKIE, session.token, max_age=ttl,
                    **sessions.cookie_args(_secure(request)))  # type: ignore[arg-type]
    resp.delete_cookie(sessions.PRE_COOKIE, path="/console")
    return resp


async def signin_page(request: Request) -> Response:
    if await signed_in(request) is not None:
        return RedirectResponse("/console/", status_code=303)
    return _form_page(request, "signin.html")


async def _form_of(request: Request) -> tuple[dict[str, str], FormTooLarge | None]:
    try:
        return await read_form(request), None
    except FormTooLarge as too_large:
        return too_large.form, too_large


async def signin(request: Request) -> Response:
    form, too_large = await _form_of(request)
    try:
        _check_pre(request, form)
        if too_large is not None:
            raise too_large
        return await _start_session(request, form.get("username", ""), form.get("password", ""),
                                    _next(form.get("next")))
    except Problem as problem:
        return _problem_page(request, "signin.html", "signin", problem,
                             {"username": form.get("username", ""), "next": form.get("next", "")})


async def register_page(request: Request) -> Response:
    return _form_page(request, "register.html")


async def register(request: Request) -> Response:
    form, too_large = await _form_of(request)
    s = state(request)
    try:
        _check_pre(request, form)
        if too_large is not None:
            raise too_large
        creds = validated(Credentials, {"username": form.get("username", ""),
                                        "password": form.get("password", "")})
        await accounts.register_at(s, creds.username, creds.password,
                                   address=client_address(request), throttle=s.auth_throttle,
                                   kdf=s.kdf)
        return await _start_session(request, creds.username, creds.password, "/console/")
    except Problem as problem:
        return _problem_page(request, "register.html", "register", problem,
                             {"username": form.get("username", "")})


async def signout(request: Request) -> Response:
    who = await signed_in(request)
    if who is not None:
        form, _ = await _form_of(request)  # signing out needs only the token: size is no matter
        try:
            csrf.check(who[1].csrf, form, dict(request.headers))
        except Problem as problem:
            return Response(problem.detail, status_code=problem.status, media_type="text/plain")
        await sessions.delete(state(request).redis, who[1].token)
    resp = RedirectResponse("/console/signin", status_code=303)
    resp.delete_cookie(sessions.COOKIE, path="/console")
    return resp

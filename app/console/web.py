"""What every console page needs: the signed-in owner, the form, CSRF, rendering.

A page handler gets a :class:`Ctx` (``@page``); a form handler (``@action``) is
refused without the session's CSRF token, and when the service it calls raises
a problem, the page it came from is rendered again with the problem's detail
next to that form (status = the problem's status), so plain HTML forms and
htmx-boosted ones show the same message.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from app.console import csrf
from app.console.peer_fields import link_uri
from app.platform.errors import Problem, validation_problem
from app.services.principals import Owner
from app.web import session as sessions
from app.web.auth import SESSION, authenticate
from app.web.inputs import check_path_params, check_storable
from app.web.state import State, state

M = TypeVar("M", bound=BaseModel)
HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))


def _when(value: Any) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    # Stored times are UTC; a page read across time zones must say so.
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return f"{value:%Y-%m-%d %H:%M:%S} UTC"


def _pretty(value: Any) -> str:
    # Peers choose these values: nesting deep enough to exhaust the recursion
    # limit, or an integer longer than Python will print, is a note, not a 500.
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    except (RecursionError, ValueError, TypeError) as exc:
        return f"(not shown: {type(exc).__name__})"


templates.env.filters["when"] = _when
templates.env.filters["pretty"] = _pretty
# A peer's file URI is a link only when it is http(s) (app.console.peer_fields).
templates.env.filters["link_uri"] = link_uri

# Scripts only from our own origin, no inline script, no framing: should an
# escaping mistake ever let markup through, it still cannot run.
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


@dataclass
class ActionError:
    """A problem shown next to the form named ``action``."""
    action: str
    detail: str
    status: int
    errors: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Ctx:
    request: Request
    state: State
    owner: Owner
    session: sessions.Session
    form: dict[str, str]
    too_large: FormTooLarge | None = None

    @property
    def query(self) -> Any:
        return self.request.query_params

    def path(self, name: str) -> str:
        return str(self.request.path_params[name])

    def render(self, template: str, *, status: int = 200, error: ActionError | None = None,
               **data: Any) -> Response:
        return templates.TemplateResponse(
            self.request, template, status_code=status,
            context={"me": self.owner, "csrf_token": self.session.csrf, "error": error,
                     "form": self.form, "form_max": self.state.settings.console_form_max_bytes,
                     **data},
            headers=SECURITY_HEADERS)


Handler = Callable[[Ctx], Awaitable[Response]]
Renderer = Callable[..., Awaitable[Response]]


class FormTooLarge(Problem):
    """A form over the body limit, parsed anyway (the console's own, larger limit let
    it in) so that its page comes back with the problem and the typed text kept."""

    def __init__(self, size: int, limit: int, form: dict[str, str]) -> None:
        super().__init__(413, f"too large to send: {_mib(size)} (the limit is {_mib(limit)}, "
                              f"{limit} bytes). Your text is still below; shorten it, or split it "
                              "into several messages.", limit_bytes=limit)
        self.form = form


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


async def read_form(request: Request) -> dict[str, str]:
    if request.method != "POST":
        return {}
    body = await request.body()
    raw = body.decode("utf-8", errors="replace")
    form: dict[str, str] = {}
    for key, value in parse_qsl(raw, keep_blank_values=True):
        # A repeated field (checkboxes) is joined; no console form needs more.
        form[key] = f"{form[key]},{value}" if key in form else value
    check_storable(form)
    limit = state(request).settings.max_body_bytes
    if len(body) > limit:
        raise FormTooLarge(len(body), limit, form)
    return form


async def signed_in(request: Request) -> tuple[Owner, sessions.Session] | None:
    try:
        who = await authenticate(request, "owner", session=True)
    except Problem as problem:
        if problem.status != 401:
            raise
        return None
    assert isinstance(who, Owner)
    return who, request.scope[SESSION]


def to_signin(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/console/signin?next={quote(target)}", status_code=303)


async def _ctx(request: Request) -> Ctx | Response:
    """The signed-in context, a redirect to sign in, or an error page for input
    that cannot even be read (a NUL byte in a path or a field)."""
    who = await signed_in(request)
    if who is None:
        return to_signin(request)
    ctx = Ctx(request, state(request), who[0], who[1], {})
    try:
        check_path_params(request)
        ctx.form = await read_form(request)
    except FormTooLarge as too_large:
        ctx.form, ctx.too_large = too_large.form, too_large  # the action answers it
    except Problem as problem:
        return error_page(ctx, problem)
    return ctx


def error_page(ctx: Ctx, problem: Problem) -> Response:
    return ctx.render("error.html", status=problem.status, problem=problem)


def page(fn: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        ctx = await _ctx(request)
        if not isinstance(ctx, Ctx):
            return ctx
        try:
            return await fn(ctx)
        except Problem as problem:
            return error_page(ctx, problem)
    return endpoint


def action(name: str, again: Renderer) -> Callable[[Handler], Callable[[Request], Awaitable[Response]]]:
    """A form handler; on a problem, ``again(ctx, error=…, status=…)`` renders its page."""
    def wrap(fn: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            ctx = await _ctx(request)
            if not isinstance(ctx, Ctx):
                return ctx
            try:
                csrf.check(ctx.session.csrf, ctx.form, dict(request.headers))
            except Problem as problem:
                return error_page(ctx, problem)
            try:
                if ctx.too_large is not None:
                    raise ctx.too_large
                return await fn(ctx)
            except Problem as problem:
                err = ActionError(name, problem.detail, problem.status,
                                  problem.extra.get("errors") or [])
                try:
                    return await again(ctx, error=err, status=problem.status)
                except Problem as second:  # the page itself is gone (e.g. just deleted)
                    return error_page(ctx, second)
        return endpoint
    return wrap


def post_only(home: str) -> Callable[[Request], Awaitable[Response]]:
    """The page for a GET of a form's address: 405 with a way back (``home`` is the
    page the form is on, a route template filled in from this request's path)."""
    @page
    async def endpoint(ctx: Ctx) -> Response:
        back_to = "/console" + home.format(**{k: quote(str(v), safe="@:._-")
                                             for k, v in ctx.request.path_params.items()})
        problem = Problem(405, "This address only receives a form, so there is nothing to show "
                               "here (a reload or an old link brought you here; nothing was "
                               "done). The form is on the page linked below.",
                          title="Nothing to show here")
        resp = ctx.render("error.html", status=405, problem=problem, back_to=back_to)
        resp.headers["Allow"] = "POST"
        return resp
    endpoint.post_only = True  # type: ignore[attr-defined]  # how tests find these routes
    return endpoint


def validated(model: type[M], data: dict[str, Any]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_problem(exc) from exc


def back(url: str) -> Response:
    """Post/redirect/get: a reload never resubmits the form."""
    return RedirectResponse(url, status_code=303)

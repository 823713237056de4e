"""Agents and their API keys (create, edit, delete with confirmation; keys shown once)."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from app.console import flash
from app.console.owned import my_agents
from app.console.runs_panel import live_run, runs_panel
from app.console.web import ActionError, Ctx, action, back, page, validated
from app.domain.schemas import AgentCreate, AgentPatch, WebhookPut
from app.platform.errors import Problem
from app.responses import AgentOut
from app.services import a2a_remotes, accounts, webhooks


def _skills(raw: str) -> list[Any] | None:
    """Skills are edited as the A2A JSON list they are stored as."""
    if not raw.strip():
        return []
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise Problem(422, f"skills must be a JSON list of {{\"id\", \"name\"}} objects: {exc}",
                      errors=[{"field": "skills", "message": str(exc)}]) from None
    return value  # type: ignore[no-any-return]


def _fields(ctx: Ctx) -> dict[str, Any]:
    f = ctx.form
    data: dict[str, Any] = {k: f[k] for k in ("display_name", "description", "instructions")
                            if k in f}
    if "skills" in f:
        data["skills"] = _skills(f["skills"])
    if "daily_budget_usd" in f:  # empty: no budget
        data["daily_budget_usd"] = _number(f["daily_budget_usd"])
    return data


def _number(raw: str) -> float | str | None:
    """A form's number field: None when empty, the text itself when it is not a
    number (so validation names the field and the value)."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        return raw


async def agents_page(ctx: Ctx, *, error: ActionError | None = None, status: int = 200) -> Response:
    return ctx.render("agents.html", status=status, error=error, nav="agents",
                      agents=await my_agents(ctx))


@page
async def agents(ctx: Ctx) -> Response:
    return await agents_page(ctx)


def _headers(raw: str) -> dict[str, str]:
    """An A2A remote's headers, typed one per line as ``Name: value``."""
    headers: dict[str, str] = {}
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise Problem(422, f"a2a headers: line {number} is not 'Name: value'",
                          errors=[{"field": "a2a_headers", "message": "one 'Name: value' "
                                   "per line"}])
        headers[name.strip()] = value.strip()
    return headers


@action("create-agent", agents_page)
async def create_agent(ctx: Ctx) -> Response:
    data = {"name": ctx.form.get("name", ""), **_fields(ctx)}
    card_url = ctx.form.get("a2a_card_url", "").strip()
    if card_url:  # served by an A2A server elsewhere (ADR 041)
        data["a2a"] = {"card_url": card_url,
                       "headers": _headers(ctx.form.get("a2a_headers", "")) or None}
    body = validated(AgentCreate, data)
    s = ctx.state
    if body.a2a is not None:
        created = await a2a_remotes.create(s, ctx.owner, body)
    else:
        created = await accounts.create_agent(s, ctx.owner, body)
    return back(f"/console/agents/{created.agent_id}")


async def _shown_once(ctx: Ctx, param: str, kind: str, agent_id: str) -> tuple[dict[str, Any] | None, bool]:
    """The secret a form just made, taken out of its flash (once), and whether the
    page was asked for one that is gone (a reload, a second look)."""
    flash_id = ctx.query.get(param)
    if not flash_id:
        return None, False
    value = await flash.take(ctx.state.redis, ctx.session.token, flash_id)
    if value is None or value.get("kind") != kind or value.get("agent_id") != agent_id:
        return None, True
    return value, False


async def agent_page(ctx: Ctx, *, error: ActionError | None = None, status: int = 200) -> Response:
    agent_id = ctx.path("agent_id")
    pool = ctx.state.pool
    new_key, key_gone = await _shown_once(ctx, "key", "key", agent_id)
    new_webhook, secret_gone = await _shown_once(ctx, "secret", "webhook", agent_id)
    agent = await accounts.agent_view(pool, await accounts.owned_agent(pool, ctx.owner, agent_id))
    keys = await accounts.list_keys(pool, ctx.owner, agent_id)
    try:
        webhook = await webhooks.get(pool, ctx.owner, agent_id)
    except Problem:
        webhook = None  # none registered
    runs = await runs_panel(pool, ctx.owner, agent_id, ctx.query)
    return ctx.render("agent.html", status=status, error=error, nav="agents", agent=agent,
                      keys=keys, new_key=new_key, webhook=webhook, new_webhook=new_webhook,
                      runs=runs, key_gone=key_gone, secret_gone=secret_gone,
                      skills_json=json.dumps(agent.skills, indent=2) if agent.skills else "")


@page
async def agent(ctx: Ctx) -> Response:
    return await agent_page(ctx)


@page
async def run_live(ctx: Ctx) -> Response:
    """The agent page's live block alone (console.js re-reads it while the page is open)."""
    agent_id = ctx.path("agent_id")
    await accounts.owned_agent(ctx.state.pool, ctx.owner, agent_id)  # 404 for anyone else's
    return ctx.render("_run_live.html", live=await live_run(ctx.state.pool, agent_id))


@action("edit-agent", agent_page)
async def edit_agent(ctx: Ctx) -> Response:
    agent_id = ctx.path("agent_id")
    await accounts.patch_agent(ctx.state, ctx.owner, agent_id,
                               validated(AgentPatch, _fields(ctx)))
    return back(f"/console/agents/{agent_id}?saved=1")


@page
async def confirm_delete(ctx: Ctx) -> Response:
    agent = AgentOut.of(await accounts.owned_agent(ctx.state.pool, ctx.owner, ctx.path("agent_id")))
    return ctx.render("agent_delete.html", nav="agents", agent=agent)


@action("delete-agent", agent_page)
async def delete_agent(ctx: Ctx) -> Response:
    await accounts.delete_agent(ctx.state, ctx.owner, ctx.path("agent_id"))
    return back("/console/agents?deleted=1")


@action("create-key", agent_page)
async def create_key(ctx: Ctx) -> Response:
    # Post/redirect/get: the key waits in a one-time flash for the page after the
    # redirect (only its hash is stored for good); a reload creates nothing.
    agent_id = ctx.path("agent_id")
    key = await accounts.create_key(ctx.state, ctx.owner, agent_id)
    flash_id = await flash.put(ctx.state.redis, ctx.session.token,
                               {"kind": "key", "agent_id": agent_id, "key_id": key.key_id,
                                "api_key": key.api_key})
    return back(f"/console/agents/{agent_id}?key={flash_id}#newkey-h")


@action("revoke-key", agent_page)
async def revoke_key(ctx: Ctx) -> Response:
    agent_id = ctx.path("agent_id")
    await accounts.revoke_key(ctx.state, ctx.owner, agent_id, ctx.path("key_id"))
    return back(f"/console/agents/{agent_id}?revoked=1")


@action("put-webhook", agent_page)
async def put_webhook(ctx: Ctx) -> Response:
    # As for a key: the signing secret is shown once, on the page after the redirect.
    body = validated(WebhookPut, {"url": ctx.form.get("url", "")})
    s = ctx.state
    agent_id = ctx.path("agent_id")
    created = await webhooks.put(s, ctx.owner, agent_id, body.url)
    flash_id = await flash.put(s.redis, ctx.session.token,
                               {"kind": "webhook", "agent_id": agent_id, "secret": created.secret})
    return back(f"/console/agents/{agent_id}?secret={flash_id}#webhook-h")


@action("delete-webhook", agent_page)
async def delete_webhook(ctx: Ctx) -> Response:
    agent_id = ctx.path("agent_id")
    await webhooks.remove(ctx.state, ctx.owner, agent_id)
    return back(f"/console/agents/{agent_id}?webhook_removed=1")

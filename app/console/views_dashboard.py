"""The dashboard: my agents, what needs me, recent tasks; its counters refresh live."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from app.console.owned import as_actor, human, my_agents, tasks_across
from app.console.web import Ctx, page
from app.services import admin as admin_service
from app.services import social
from app.services import tasks as tasks_service


async def action_items(ctx: Ctx) -> dict[str, Any]:
    agents = await my_agents(ctx)
    requests = []
    for agent in agents:
        requests += (await social.list_friends(ctx.state.pool, as_actor(ctx, agent))).incoming_requests
    me = await human(ctx)
    waiting = (await tasks_service.list_tasks(ctx.state.pool, me, state="input-required",
                                              context_id=None, cursor=None, limit=50)).tasks
    failed = (await tasks_across(ctx, agents, state="failed", limit=20)).tasks
    dead = None
    if ctx.owner.is_admin:
        dead = (await admin_service.outbox_overview(ctx.state.pool)).counts.get("failed", 0)
    return {
        "agents": agents,
        "requests": requests,
        "waiting": waiting,
        "failed": failed,
        "draining": [a for a in agents if a.status == "draining"],
        "online": sum(1 for a in agents if a.status == "active" and a.kind != "virtual-user"),
        "dead_letters": dead,
    }


@page
async def dashboard(ctx: Ctx) -> Response:
    items = await action_items(ctx)
    recent = (await tasks_across(ctx, items["agents"], limit=10)).tasks
    return ctx.render("dashboard.html", nav="dashboard", recent=recent, **items)


@page
async def counters(ctx: Ctx) -> Response:
    """The counters alone, for the dashboard to swap in when the feed says something changed."""
    return ctx.render("_counters.html", **(await action_items(ctx)))

"""The dashboard: my agents, what needs me, recent tasks; its counters refresh live."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from app.console.owned import as_actor, human, my_agents, tasks_across
from app.console.runs_panel import spend_panel
from app.console.web import Ctx, page
from app.responses import TaskOut
from app.services import admin as admin_service
from app.services import social
from app.services import tasks as tasks_service
from app.services.principals import Agent


async def action_items(ctx: Ctx) -> dict[str, Any]:
    agents = await my_agents(ctx)
    requests = []
    for agent in agents:
        requests += (await social.list_friends(ctx.state.pool, as_actor(ctx, agent))).incoming_requests
    me = await human(ctx)
    waiting = await waiting_for(ctx, me)
    failed = (await tasks_across(ctx, agents, state="failed", limit=20)).tasks
    dead = None
    if ctx.owner.is_admin:
        dead = (await admin_service.outbox_overview(ctx.state.pool)).counts.get("failed", 0)
    return {
        "agents": agents,
        "requests": requests,
        "waiting": waiting,
        "human_id": me.agent_id,
        "failed": failed,
        "draining": [a for a in agents if a.status == "draining"],
        "online": sum(1 for a in agents if a.status == "active" and a.kind != "virtual-user"),
        "dead_letters": dead,
    }


# What makes a task the human's move: a task sent *to* human@{me} that is still
# open on the human's side, or one the human started whose agent asks for input.
SERVED_OPEN = ("submitted", "working")


async def waiting_for(ctx: Ctx, me: Agent) -> list[TaskOut]:
    found: list[TaskOut] = []
    for state in (*SERVED_OPEN, "input-required"):
        page = await tasks_service.list_tasks(ctx.state.pool, me, state=state, context_id=None,
                                              cursor=None, limit=50)
        for t in page.tasks:
            mine = (t.serving_agent if state in SERVED_OPEN else t.initiator) == me.agent_id
            if mine:
                found.append(t)
    found.sort(key=lambda t: t.updated_at, reverse=True)
    return found[:50]


@page
async def dashboard(ctx: Ctx) -> Response:
    items = await action_items(ctx)
    recent = (await tasks_across(ctx, items["agents"], limit=10)).tasks
    spend = await spend_panel(ctx.state.pool, [a.agent_id for a in items["agents"]
                                               if a.kind != "virtual-user"])
    return ctx.render("dashboard.html", nav="dashboard", recent=recent, spend=spend, **items)


@page
async def counters(ctx: Ctx) -> Response:
    """The counters and the "Needs you" list (swapped out of band), from one read:
    the dashboard swaps both in when the feed says something changed, so they agree."""
    return ctx.render("_live_dashboard.html", **(await action_items(ctx)))

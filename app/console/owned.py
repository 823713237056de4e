"""The owner's agents as actors: the console acts on behalf of them through the
same services as the owner API (app.services.*), scoped the same way — an agent
or task no agent of mine takes part in is "not found", never "forbidden"."""

from __future__ import annotations

from dataclasses import dataclass

from app.console.web import Ctx
from app.platform.errors import Problem, not_found
from app.responses import AgentOut, TaskDetail, TaskOut
from app.services import accounts
from app.services import tasks as tasks_service
from app.services.principals import Agent
from app.store import tasks as tasks_store


async def my_agents(ctx: Ctx) -> list[AgentOut]:
    return (await accounts.list_agents(ctx.state.pool, ctx.owner)).agents


def as_actor(ctx: Ctx, agent: AgentOut) -> Agent:
    return Agent(agent.agent_id, ctx.owner.user_id, agent.kind)


async def actor(ctx: Ctx, agent_id: str) -> Agent:
    return await accounts.act_as(ctx.state.pool, ctx.owner, agent_id)


async def human(ctx: Ctx) -> Agent:
    return await accounts.virtual_user_of(ctx.state.pool, ctx.owner)


@dataclass
class TaskSlice:
    tasks: list[TaskOut]
    next_cursor: str | None


async def tasks_across(ctx: Ctx, agents: list[AgentOut], *, state: str | None = None,
                       context_id: str | None = None, cursor: str | None = None,
                       limit: int = 25) -> TaskSlice:
    """Newest first across several agents. Every agent's list is keyset-ordered
    by (created_at, task_id), so one cursor pages them all: take the next
    ``limit`` of each, merge, keep the first ``limit``."""
    seen: dict[str, TaskOut] = {}
    more = False
    for agent in agents:
        page = await tasks_service.list_tasks(ctx.state.pool, as_actor(ctx, agent), state=state,
                                              context_id=context_id, cursor=cursor, limit=limit)
        more = more or page.next_cursor is not None
        for task in page.tasks:
            seen.setdefault(task.task_id, task)
    merged = sorted(seen.values(), key=lambda t: (t.created_at, t.task_id), reverse=True)
    page_tasks = merged[:limit]
    has_next = len(merged) > limit or (more and len(page_tasks) == limit)
    next_cursor = tasks_service.encode_cursor(page_tasks[-1].model_dump()) \
        if has_next and page_tasks else None
    return TaskSlice(page_tasks, next_cursor)


async def search_across(ctx: Ctx, agents: list[AgentOut], text: str, *, state: str | None,
                        context_id: str | None, cursor: str | None, limit: int) -> TaskSlice:
    """Like :func:`tasks_across`, keeping the tasks whose ids, agents or message
    text contain ``text``; the same cursor form."""
    before = tasks_service.decode_cursor(cursor) if cursor else None
    rows = await tasks_store.search_for_agents(ctx.state.pool, [a.agent_id for a in agents], text,
                                               state=state, context_id=context_id, before=before,
                                               limit=limit + 1)
    found = [TaskOut.of(r) for r in rows[:limit]]
    next_cursor = tasks_service.encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return TaskSlice(found, next_cursor)


async def task_of_mine(ctx: Ctx, task_id: str, agents: list[AgentOut]
                      ) -> tuple[TaskDetail, Agent]:
    """The task as seen by one of my agents (``agents``: all of them) that takes
    part in it (the human agent first, since the console acts as it)."""
    for agent in sorted(agents, key=lambda a: a.kind != "virtual-user"):
        who = as_actor(ctx, agent)
        try:
            return await tasks_service.get_task(ctx.state.pool, who, task_id), who
        except Problem as problem:
            if problem.status != 404:
                raise
    raise not_found(f"no task '{task_id}' that one of your agents takes part in")

"""Tasks across my agents; one task's messages, receipts, artifacts and cost; the
human in the loop (start, answer, cancel as ``human@{me}``)."""

from __future__ import annotations

from starlette.responses import Response

from app.console.owned import human, my_agents, search_across, task_of_mine, tasks_across
from app.console.runs_panel import task_runs_view
from app.console.web import ActionError, Ctx, action, back, page, validated
from app.domain.ids import is_valid_id
from app.domain.schemas import MessageIn, StatusChange, TaskCreate
from app.domain.task_states import STATES
from app.platform.errors import Problem
from app.services import social, task_creation, timeline
from app.services import tasks as tasks_service
from app.store import tasks as tasks_store

PAGE_SIZE = 25


async def tasks_page(ctx: Ctx, *, error: ActionError | None = None, status: int = 200) -> Response:
    q = ctx.query
    agents = await my_agents(ctx)
    chosen = q.get("agent") or ""
    state = q.get("state") or None
    context_id = q.get("context_id") or None
    text = (q.get("q") or "").strip()
    if state is not None and state not in STATES:
        raise Problem(422, f"unknown state '{state}'; one of {', '.join(sorted(STATES))}")
    if context_id is not None and not is_valid_id(context_id):
        raise Problem(422, "context_id is not a valid id")
    scope = [a for a in agents if a.agent_id == chosen] if chosen else agents
    if chosen and not scope:
        raise Problem(404, f"no agent '{chosen}' owned by you")
    cursor = q.get("cursor") or None
    if text:
        found = await search_across(ctx, scope, text, state=state, context_id=context_id,
                                    cursor=cursor, limit=PAGE_SIZE)
    else:
        found = await tasks_across(ctx, scope, state=state, context_id=context_id,
                                   cursor=cursor, limit=PAGE_SIZE)
    me = await human(ctx)
    peers = (await social.list_friends(ctx.state.pool, me)).friends
    filters = {"agent": chosen, "state": state or "", "context_id": context_id or "", "q": text}
    return ctx.render("tasks.html", status=status, error=error, nav="tasks", tasks=found.tasks,
                      next_cursor=found.next_cursor, agents=agents, states=sorted(STATES),
                      filters=filters, peers=peers, human_id=me.agent_id)


@page
async def tasks(ctx: Ctx) -> Response:
    return await tasks_page(ctx)


def _text_message(text: str) -> MessageIn:
    if not text.strip():
        raise Problem(422, "write a message first", errors=[{"field": "text",
                                                             "message": "is empty"}])
    return validated(MessageIn, {"parts": [{"kind": "text", "text": text}]})


@action("start-task", tasks_page)
async def start_task(ctx: Ctx) -> Response:
    body = validated(TaskCreate, {"to_agent_id": ctx.form.get("to_agent_id", "").strip(),
                                  "message": _text_message(ctx.form.get("text", "")).model_dump(
                                      exclude_none=True)})
    s = ctx.state
    created, _ = await task_creation.create_task(s, await human(ctx), body)
    return back(f"/console/tasks/{created.task_id}")


async def task_page(ctx: Ctx, *, error: ActionError | None = None, status: int = 200) -> Response:
    agents = await my_agents(ctx)
    detail, viewer = await task_of_mine(ctx, ctx.path("task_id"), agents)
    try:
        context = await timeline.context_timeline(ctx.state.pool, ctx.owner, detail.context_id, 200)
    except Problem:
        context = None
    me = await human(ctx)
    # Read only after task_of_mine found the task ours: the history is never a way round the scope.
    history = await tasks_store.state_history(ctx.state.pool, detail.task_id)
    # My agents' runs as the gateway recorded them; a peer's figures as its runtime
    # wrote them (only plausible ones are shown or summed).
    runs = await task_runs_view(ctx.state.pool, ctx.owner, detail.task_id,
                                {a.agent_id for a in agents},
                                [(m.sender, m.metadata) for m in detail.messages])
    return ctx.render("task.html", status=status, error=error, nav="tasks", task=detail,
                      history=history,
                      viewer=viewer.agent_id, runs=runs, context=context,
                      as_human=me.agent_id in (detail.initiator, detail.serving_agent),
                      serving_human=me.agent_id == detail.serving_agent,
                      terminal=detail.state in ("completed", "failed", "canceled", "rejected"))


@page
async def task(ctx: Ctx) -> Response:
    return await task_page(ctx)


@action("answer", task_page)
async def answer(ctx: Ctx) -> Response:
    task_id = ctx.path("task_id")
    s = ctx.state
    await tasks_service.append_message(s, await human(ctx), task_id,
                                       _text_message(ctx.form.get("text", "")))
    return back(f"/console/tasks/{task_id}")


@action("cancel", task_page)
async def cancel(ctx: Ctx) -> Response:
    task_id = ctx.path("task_id")
    s = ctx.state
    await tasks_service.change_status(s, await human(ctx), task_id,
                                      validated(StatusChange, {"state": "canceled"}))
    return back(f"/console/tasks/{task_id}")


# A task sent to human@{me} is finished from its page or the dashboard with one
# button. The state machine has no submitted → completed step: the console takes
# the task into working first, as an agent would (both as human@{me}).
DECISIONS = {"completed": "Completed", "rejected": "Rejected"}


@action("decide", task_page)
async def decide(ctx: Ctx) -> Response:
    task_id = ctx.path("task_id")
    target = ctx.form.get("state", "")
    if target not in DECISIONS:
        raise Problem(422, "choose Complete or Reject", errors=[{"field": "state",
                                                                 "message": "unknown decision"}])
    s = ctx.state
    me = await human(ctx)
    note = ctx.form.get("text", "")
    current = (await tasks_service.get_task(s.pool, me, task_id)).state
    if target == "completed" and current in ("submitted", "input-required"):
        await tasks_service.change_status(s, me, task_id,
                                          validated(StatusChange, {"state": "working"}))
    change: dict[str, object] = {"state": target}
    if note.strip():
        change["message"] = _text_message(note).model_dump(exclude_none=True)
    await tasks_service.change_status(s, me, task_id, validated(StatusChange, change))
    if ctx.form.get("return_to") == "dashboard":
        return back("/console/#needs-you")
    return back(f"/console/tasks/{task_id}")

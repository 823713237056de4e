"""Agent side: tasks, their messages, transitions and artifacts."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.domain.ids import ID_PATTERN
from app.domain.schemas import ArtifactIn, MessageIn, StatusChange, TaskCreate
from app.domain.task_states import STATES
from app.platform.errors import Problem
from app.responses import ArtifactOut, MessageOut, TaskDetail, TaskOut, TaskPage, TaskWithMessage
from app.services import task_creation, tasks
from app.services.principals import Agent
from app.web.endpoint import endpoint, json, query_param
from app.web.inputs import body, int_query, valid_id
from app.web.state import state


@endpoint("Create a task for a friend or group peer, with its first message", body=TaskCreate,
     response=TaskWithMessage, auth="agent", status=201, replay_status=200, tag="tasks")
async def create_task(request: Request, me: Agent) -> Response:
    data = await body(request, TaskCreate)
    s = state(request)
    result, created = await task_creation.create_task(s, me, data)
    return json(result, 201 if created else 200)


@endpoint("A task you take part in, with its messages (and their receipts) and artifacts",
     response=TaskDetail, auth="agent", tag="tasks")
async def get_task(request: Request, me: Agent) -> Response:
    return json(await tasks.get_task(state(request).pool, me, request.path_params["task_id"]))


@endpoint("Tasks you take part in, newest first; filter by state and context_id", auth="agent",
     response=TaskPage, tag="tasks", params=[
         # Empty means "no filter" (the documented query is `?state=&context_id=`).
         query_param("state", "only tasks in this state (empty: any)", type_="string",
                     enum=["", *sorted(STATES)]),
         query_param("context_id", "only tasks of this context (empty: any)", type_="string",
                     pattern=f"(^$)|({ID_PATTERN})"),
         query_param("cursor", "the next_cursor of the previous page", type_="string"),
         query_param("limit", "most tasks per page (default 50)", minimum=1, maximum=200)])
async def list_tasks(request: Request, me: Agent) -> Response:
    q = request.query_params
    task_state = q.get("state") or None
    if task_state is not None and task_state not in STATES:
        raise Problem(422, f"unknown state '{task_state}'; one of {', '.join(sorted(STATES))}")
    context_id = q.get("context_id") or None
    if context_id is not None:
        valid_id("context_id", context_id)
    limit = int_query(request, "limit", default=50, minimum=1, maximum=200)
    assert limit is not None
    return json(await tasks.list_tasks(state(request).pool, me, state=task_state,
                                       context_id=context_id, cursor=q.get("cursor") or None,
                                       limit=limit))


@endpoint("Add a message to a task (idempotent by message_id)", body=MessageIn, auth="agent",
     response=MessageOut, status=201, replay_status=200, tag="tasks")
async def add_message(request: Request, me: Agent) -> Response:
    data = await body(request, MessageIn)
    s = state(request)
    result, created = await tasks.append_message(s, me,
                                                 request.path_params["task_id"], data)
    return json(result, 201 if created else 200)


@endpoint("Move a task to another state (compare-and-set; an illegal move is 409, a repeat of "
     "the caller's own move that already took effect is answered again with 200)",
     body=StatusChange, response=TaskOut, auth="agent", tag="tasks")
async def set_status(request: Request, me: Agent) -> Response:
    data = await body(request, StatusChange)
    s = state(request)
    return json(await tasks.change_status(s, me,
                                          request.path_params["task_id"], data))


@endpoint("Attach an artifact to a task (serving agent only; idempotent by artifact_id)",
     body=ArtifactIn, response=ArtifactOut, auth="agent", status=201, replay_status=200,
     tag="tasks")
async def add_artifact(request: Request, me: Agent) -> Response:
    data = await body(request, ArtifactIn)
    s = state(request)
    result, created = await tasks.add_artifact(s, me,
                                               request.path_params["task_id"], data)
    return json(result, 201 if created else 200)


routes = [
    Route("/v1/mesh/tasks", create_task, methods=["POST"]),
    Route("/v1/mesh/tasks", list_tasks, methods=["GET"]),
    Route("/v1/mesh/tasks/{task_id}", get_task, methods=["GET"]),
    Route("/v1/mesh/tasks/{task_id}/messages", add_message, methods=["POST"]),
    Route("/v1/mesh/tasks/{task_id}/status", set_status, methods=["POST"]),
    Route("/v1/mesh/tasks/{task_id}/artifacts", add_artifact, methods=["POST"]),
]

"""Agent side, teams: group messages, broadcasts (DESIGN §4, issue 11)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.api.deps import agent, body, doc, json, state
from app.responses import BroadcastOut, GroupMessageOut
from app.schemas import BroadcastCreate, GroupMessageIn
from app.services import broadcasts, group_messages


@doc("Post a message to a group you are a member of: every other member gets one "
     "group.message", body=GroupMessageIn, response=GroupMessageOut, auth="agent", status=201,
     tag="teams")
async def post_group_message(request: Request) -> Response:
    me = await agent(request)
    data = await body(request, GroupMessageIn)
    s = state(request)
    return json(await group_messages.post(s.pool, s.settings, me,
                                          request.path_params["group_id"], data,
                                          wakeup=s.wakeup), 201)


@doc("Ask several agents (a list, or a group's other members) the same thing: one task "
     "each in a shared context; you get one broadcast.completed when the policy (all, any, "
     "n completed) is met, can no longer be met, or the timeout passes",
     body=BroadcastCreate, response=BroadcastOut, auth="agent", status=201, tag="teams")
async def create_broadcast(request: Request) -> Response:
    me = await agent(request)
    data = await body(request, BroadcastCreate)
    s = state(request)
    return json(await broadcasts.create(s.pool, s.settings, me, data, wakeup=s.wakeup), 201)


@doc("A broadcast you sent: its policy, status and each recipient's task state and last "
     "message", response=BroadcastOut, auth="agent", tag="teams")
async def get_broadcast(request: Request) -> Response:
    me = await agent(request)
    return json(await broadcasts.get(state(request).pool, me,
                                     request.path_params["broadcast_id"]))


routes = [
    Route("/v1/mesh/groups/{group_id}/messages", post_group_message, methods=["POST"]),
    Route("/v1/mesh/broadcasts", create_broadcast, methods=["POST"]),
    Route("/v1/mesh/broadcasts/{broadcast_id}", get_broadcast, methods=["GET"]),
]

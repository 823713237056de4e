"""Agent side, teams: group messages, broadcasts, context timelines, the directory."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.domain.schemas import BroadcastCreate, GroupMessageIn
from app.platform.errors import Problem
from app.responses import (
    BroadcastOut,
    ContextTimeline,
    DirectoryPage,
    GroupInvitation,
    GroupInvitations,
    GroupMessageOut,
    Membership,
)
from app.services import broadcasts, directory, group_messages, social, timeline
from app.services.principals import Agent
from app.web.endpoint import endpoint, json, query_param
from app.web.inputs import body, check_storable, int_query, valid_id
from app.web.state import state


@endpoint("Post a message to a group you are a member of: every other member gets one "
     "group.message", body=GroupMessageIn, response=GroupMessageOut, auth="agent", status=201,
     tag="teams")
async def post_group_message(request: Request, me: Agent) -> Response:
    data = await body(request, GroupMessageIn)
    s = state(request)
    return json(await group_messages.post(s, me, request.path_params["group_id"], data), 201)


@endpoint("Ask several agents (a list, or a group's other members) the same thing: one task "
     "each in a shared context; you get one broadcast.completed when the policy (all, any, "
     "n completed) is met, can no longer be met, or the timeout passes",
     body=BroadcastCreate, response=BroadcastOut, auth="agent", status=201, tag="teams")
async def create_broadcast(request: Request, me: Agent) -> Response:
    data = await body(request, BroadcastCreate)
    s = state(request)
    return json(await broadcasts.create(s, me, data), 201)


@endpoint("A broadcast you sent: its policy, status and each recipient's task state and last "
     "message", response=BroadcastOut, auth="agent", tag="teams")
async def get_broadcast(request: Request, me: Agent) -> Response:
    return json(await broadcasts.get(state(request).pool, me,
                                     request.path_params["broadcast_id"]))


@endpoint("A context's timeline — its tasks, messages, state changes and artifacts, oldest "
     "first, paged (?limit=, default 200; ?cursor=next_cursor) — for participants and for "
     "members of the group the context belongs to", response=ContextTimeline, auth="agent",
     tag="teams",
     params=[query_param("limit", "most entries (default 200)", minimum=1, maximum=1000),
             query_param("cursor", "next_cursor of the previous page", type_="string")])
async def context_timeline(request: Request, me: Agent) -> Response:
    context_id = valid_id("context_id", request.path_params["context_id"])
    limit = int_query(request, "limit", default=200, minimum=1, maximum=1000)
    assert limit is not None
    return json(await timeline.agent_timeline(state(request).pool, me, context_id, limit,
                                              request.query_params.get("cursor") or None))


@endpoint("Search the directory of listed agents: ?q= words (over name, display name, skills and "
     "description; ranked), ?skill= a skill id, name or tag, ?limit=, ?cursor=",
     response=DirectoryPage, auth="agent", tag="teams",
     params=[query_param("q", "words to search for", type_="string", maxLength=200),
             query_param("skill", "a skill id, name or tag", type_="string"),
             query_param("limit", "most agents (default 20)", minimum=1, maximum=100),
             query_param("cursor", "next_cursor of the previous page", type_="string")])
async def directory_search(request: Request, me: Agent) -> Response:
    q = request.query_params
    if len(q.get("q", "")) > 200:
        raise Problem(422, "q is longer than 200 characters")
    # A NUL byte would reach Postgres as a 500: a 422 naming the parameter.
    check_storable({"q": q.get("q", ""), "skill": q.get("skill", "")})
    limit = int_query(request, "limit", default=20, minimum=1, maximum=100)
    assert limit is not None
    return json(await directory.search(state(request).pool, q=q.get("q", ""),
                                       skill=q.get("skill") or None, limit=limit,
                                       cursor=q.get("cursor") or None))


@endpoint("Group invitations waiting for your answer (another owner added you to a group; "
     "each came as a group.notice \"invited\")", response=GroupInvitations, auth="agent",
     tag="teams")
async def group_invitations(request: Request, me: Agent) -> Response:
    return json(await social.group_invitations(state(request).pool, me))


@endpoint("Accept an invitation: you become a member of the group", response=Membership,
     auth="agent", tag="teams")
async def accept_group_invitation(request: Request, me: Agent) -> Response:
    s = state(request)
    return json(await social.accept_invitation(s, me, request.path_params["group_id"]))


@endpoint("Reject an invitation to a group", response=GroupInvitation, auth="agent", tag="teams")
async def reject_group_invitation(request: Request, me: Agent) -> Response:
    return json(await social.reject_invitation(state(request), me,
                                               request.path_params["group_id"]))


@endpoint("Leave a group you are a member of, whoever owns it", auth="agent", status=204,
     tag="teams")
async def leave_group(request: Request, me: Agent) -> Response:
    s = state(request)
    await social.leave_group(s, me, request.path_params["group_id"])
    return Response(status_code=204)


routes = [
    Route("/v1/mesh/groups/invitations", group_invitations, methods=["GET"]),
    Route("/v1/mesh/groups/invitations/{group_id}/accept", accept_group_invitation,
          methods=["POST"]),
    Route("/v1/mesh/groups/invitations/{group_id}/reject", reject_group_invitation,
          methods=["POST"]),
    Route("/v1/mesh/groups/{group_id}/members/me", leave_group, methods=["DELETE"]),
    Route("/v1/mesh/groups/{group_id}/messages", post_group_message, methods=["POST"]),
    Route("/v1/mesh/broadcasts", create_broadcast, methods=["POST"]),
    Route("/v1/mesh/broadcasts/{broadcast_id}", get_broadcast, methods=["GET"]),
    Route("/v1/mesh/contexts/{context_id}/timeline", context_timeline, methods=["GET"]),
    Route("/v1/mesh/directory", directory_search, methods=["GET"]),
]

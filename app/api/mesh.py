"""Agent side: presence, identity, friends, groups, cards."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.domain.schemas import FriendRequestCreate
from app.responses import (
    AgentCard,
    AgentOut,
    FriendRequestOut,
    Friends,
    GroupWithMembers,
    MemberGroups,
    Presence,
)
from app.services import accounts, presence, social
from app.services.principals import Agent
from app.store import agents as agents_store
from app.web.endpoint import endpoint, json
from app.web.inputs import body
from app.web.state import state


@endpoint("Heartbeat: mark the agent active (a draining agent stays draining)", response=Presence,
     auth="agent")
async def heartbeat(request: Request, me: Agent) -> Response:
    return json(await presence.heartbeat(state(request).pool, me))


@endpoint("Come online: active again, also after draining", response=Presence, auth="agent")
async def online(request: Request, me: Agent) -> Response:
    return json(await presence.go_online(state(request).pool, me))


@endpoint("Go offline gracefully: the agent is draining", response=Presence, auth="agent")
async def offline(request: Request, me: Agent) -> Response:
    return json(await presence.go_draining(state(request).pool, me))


@endpoint("Stopped: the agent finished its work and is offline (inactive) until it comes "
     "online again", response=Presence, auth="agent")
async def stopped(request: Request, me: Agent) -> Response:
    return json(await presence.go_inactive(state(request).pool, me))


@endpoint("Who am I: the calling agent's profile, presence and inbox cursor", response=AgentOut,
     auth="agent")
async def me(request: Request, who: Agent) -> Response:
    pool = state(request).pool
    row = await agents_store.get(pool, who.agent_id)
    assert row is not None
    return json(await accounts.agent_view(pool, row))


@endpoint("Friends (explicit and implicit) and pending friend requests", response=Friends,
     auth="agent")
async def friends(request: Request, who: Agent) -> Response:
    return json(await social.list_friends(state(request).pool, who))


@endpoint("Send a friend request (accepts theirs if they already asked you)",
     body=FriendRequestCreate, response=FriendRequestOut, auth="agent", status=201,
     replay_status=200)
async def friend_request(request: Request, who: Agent) -> Response:
    data = await body(request, FriendRequestCreate)
    s = state(request)
    result, created = await social.request_friend(s, who, data.to_agent_id, data.note)
    return json(result, 201 if created else 200)


@endpoint("Accept a friend request sent to you", response=FriendRequestOut, auth="agent")
async def friend_accept(request: Request, who: Agent) -> Response:
    s = state(request)
    return json(await social.accept_friend(s, who, request.path_params["request_id"]))


@endpoint("Reject a friend request sent to you", response=FriendRequestOut, auth="agent")
async def friend_reject(request: Request, who: Agent) -> Response:
    return json(await social.reject_friend(state(request), who,
                                           request.path_params["request_id"]))


@endpoint("Remove a friend", auth="agent", status=204)
async def friend_remove(request: Request, who: Agent) -> Response:
    # The friend is {agent_id} on the agent's own route, {friend_id} on its owner's
    # (where {agent_id} names the agent acted for).
    friend = request.path_params.get("friend_id") or request.path_params["agent_id"]
    await social.remove_friend(state(request), who, friend)
    return Response(status_code=204)


@endpoint("Groups the agent is a member of", response=MemberGroups, auth="agent")
async def groups(request: Request, who: Agent) -> Response:
    return json(MemberGroups(groups=await social.agent_groups(state(request).pool, who)))


@endpoint("Members of a group the agent belongs to", response=GroupWithMembers, auth="agent")
async def roster(request: Request, who: Agent) -> Response:
    return json(await social.roster(state(request).pool, who, request.path_params["group_id"]))


@endpoint("An agent's A2A-style card (only for agents you may talk to)", response=AgentCard,
     auth="agent")
async def card(request: Request, who: Agent) -> Response:
    return json(await social.agent_card(state(request).pool, who, request.path_params["agent_id"]))


routes = [
    Route("/v1/mesh/heartbeat", heartbeat, methods=["POST"]),
    Route("/v1/mesh/online", online, methods=["POST"]),
    Route("/v1/mesh/online", offline, methods=["DELETE"]),
    Route("/v1/mesh/offline", stopped, methods=["POST"]),
    Route("/v1/mesh/me", me, methods=["GET"]),
    Route("/v1/mesh/friends", friends, methods=["GET"]),
    Route("/v1/mesh/friends/requests", friend_request, methods=["POST"]),
    Route("/v1/mesh/friends/requests/{request_id}/accept", friend_accept, methods=["POST"]),
    Route("/v1/mesh/friends/requests/{request_id}/reject", friend_reject, methods=["POST"]),
    Route("/v1/mesh/friends/{agent_id}", friend_remove, methods=["DELETE"]),
    Route("/v1/mesh/groups", groups, methods=["GET"]),
    Route("/v1/mesh/groups/{group_id}/roster", roster, methods=["GET"]),
    Route("/v1/mesh/agents/{agent_id}/card", card, methods=["GET"]),
]

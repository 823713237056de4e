"""Agent side: presence, identity, friends, groups, cards."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.api.deps import agent, body, doc, json, state
from app.responses import (
    AgentCard,
    AgentOut,
    FriendRequestOut,
    Friends,
    GroupWithMembers,
    MemberGroups,
    Presence,
)
from app.schemas import FriendRequestCreate
from app.services import accounts, presence, social
from app.store import agents as agents_store


@doc("Heartbeat: mark the agent active (a draining agent stays draining)", response=Presence,
     auth="agent")
async def heartbeat(request: Request) -> Response:
    me = await agent(request)
    return json(await presence.heartbeat(state(request).pool, me))


@doc("Come online: active again, also after draining", response=Presence, auth="agent")
async def online(request: Request) -> Response:
    me = await agent(request)
    return json(await presence.go_online(state(request).pool, me))


@doc("Go offline gracefully: the agent is draining", response=Presence, auth="agent")
async def offline(request: Request) -> Response:
    me = await agent(request)
    return json(await presence.go_draining(state(request).pool, me))


@doc("Stopped: the agent finished its work and is offline (inactive) until it comes "
     "online again", response=Presence, auth="agent")
async def stopped(request: Request) -> Response:
    me = await agent(request)
    return json(await presence.go_inactive(state(request).pool, me))


@doc("Who am I: the calling agent's profile, presence and inbox cursor", response=AgentOut,
     auth="agent")
async def me(request: Request) -> Response:
    who = await agent(request)
    pool = state(request).pool
    row = await agents_store.get(pool, who.agent_id)
    assert row is not None
    return json(await accounts.agent_view(pool, row))


@doc("Friends (explicit and implicit) and pending friend requests", response=Friends,
     auth="agent")
async def friends(request: Request) -> Response:
    who = await agent(request)
    return json(await social.list_friends(state(request).pool, who))


@doc("Send a friend request (accepts theirs if they already asked you)",
     body=FriendRequestCreate, response=FriendRequestOut, auth="agent", status=201,
     replay_status=200)
async def friend_request(request: Request) -> Response:
    who = await agent(request)
    data = await body(request, FriendRequestCreate)
    s = state(request)
    result, created = await social.request_friend(s.pool, s.settings, who, data.to_agent_id,
                                                  data.note, reach_changed=s.reach_changed,
                                                  wakeup=s.wakeup)
    return json(result, 201 if created else 200)


@doc("Accept a friend request sent to you", response=FriendRequestOut, auth="agent")
async def friend_accept(request: Request) -> Response:
    who = await agent(request)
    s = state(request)
    return json(await social.accept_friend(s.pool, s.settings, who,
                                           request.path_params["request_id"],
                                           reach_changed=s.reach_changed, wakeup=s.wakeup))


@doc("Reject a friend request sent to you", response=FriendRequestOut, auth="agent")
async def friend_reject(request: Request) -> Response:
    who = await agent(request)
    return json(await social.reject_friend(state(request).pool, who,
                                           request.path_params["request_id"]))


@doc("Remove a friend", auth="agent", status=204)
async def friend_remove(request: Request) -> Response:
    who = await agent(request)
    await social.remove_friend(state(request).pool, who, request.path_params["agent_id"],
                               reach_changed=state(request).reach_changed)
    return Response(status_code=204)


@doc("Groups the agent is a member of", response=MemberGroups, auth="agent")
async def groups(request: Request) -> Response:
    who = await agent(request)
    return json(MemberGroups(groups=await social.agent_groups(state(request).pool, who)))


@doc("Members of a group the agent belongs to", response=GroupWithMembers, auth="agent")
async def roster(request: Request) -> Response:
    who = await agent(request)
    return json(await social.roster(state(request).pool, who, request.path_params["group_id"]))


@doc("An agent's A2A-style card (only for agents you may talk to)", response=AgentCard,
     auth="agent")
async def card(request: Request) -> Response:
    who = await agent(request)
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

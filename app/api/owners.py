"""Owner side: agents, API keys, groups, friendships on behalf of own agents."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.api.deps import body, doc, json, owner, state
from app.responses import (
    AgentList,
    AgentOut,
    FriendRequestOut,
    Friends,
    GroupInvitation,
    GroupInvitations,
    GroupWithMembers,
    KeyList,
    Membership,
    NewKey,
    OwnedGroup,
    OwnedGroups,
)
from app.schemas import AgentCreate, AgentPatch, FriendRequestCreate, GroupCreate, GroupMemberAdd
from app.services import a2a_remotes, accounts, social
from app.services.principals import Agent


@doc("Create an agent; its agent_id is {name}@{username}. With `a2a` it is served by "
     "an A2A server elsewhere (kind \"a2a\"), forwarded by the a2a-bridge process", body=AgentCreate,
     response=AgentOut, auth="owner", status=201, tag="owners")
async def create_agent(request: Request) -> Response:
    me = await owner(request)
    data = await body(request, AgentCreate)
    s = state(request)
    if data.a2a is not None:  # served by an A2A server elsewhere (ADR 041)
        return json(await a2a_remotes.create(s.pool, s.redis, s.settings, me, data), 201)
    return json(await accounts.create_agent(s.pool, me, data), 201)


@doc("List your agents (including your virtual-user agent)", response=AgentList,
     auth="owner", tag="owners")
async def list_agents(request: Request) -> Response:
    me = await owner(request)
    return json(await accounts.list_agents(state(request).pool, me))


@doc("Get one of your agents", response=AgentOut, auth="owner", tag="owners")
async def get_agent(request: Request) -> Response:
    me = await owner(request)
    pool = state(request).pool
    row = await accounts.owned_agent(pool, me, request.path_params["agent_id"])
    return json(await accounts.agent_view(pool, row))


@doc("Change an agent's display name, description, skills, instructions, listing or "
     "daily budget (null removes it)", body=AgentPatch,
     response=AgentOut, auth="owner", tag="owners")
async def patch_agent(request: Request) -> Response:
    me = await owner(request)
    data = await body(request, AgentPatch)
    return json(await accounts.patch_agent(state(request).pool, me,
                                           request.path_params["agent_id"], data))


@doc("Delete an agent; its keys and tokens stop working at once", auth="owner", status=204,
     tag="owners")
async def delete_agent(request: Request) -> Response:
    me = await owner(request)
    s = state(request)
    await accounts.delete_agent(s.pool, me, request.path_params["agent_id"],
                                auth_changed=s.auth_changed)
    return Response(status_code=204)


@doc("Create an API key for an agent; the key is shown only in this response",
     response=NewKey, auth="owner", status=201, tag="owners")
async def create_key(request: Request) -> Response:
    me = await owner(request)
    return json(await accounts.create_key(state(request).pool, me,
                                          request.path_params["agent_id"]), 201)


@doc("List an agent's API keys (ids and dates, never the keys)", response=KeyList,
     auth="owner", tag="owners")
async def list_keys(request: Request) -> Response:
    me = await owner(request)
    keys = await accounts.list_keys(state(request).pool, me, request.path_params["agent_id"])
    return json(KeyList(keys=keys))


@doc("Revoke an API key; tokens issued from it stop working at once", auth="owner", status=204,
     tag="owners")
async def revoke_key(request: Request) -> Response:
    me = await owner(request)
    s = state(request)
    await accounts.revoke_key(s.pool, me, request.path_params["agent_id"],
                              request.path_params["key_id"],
                              auth_changed=s.auth_changed)
    return Response(status_code=204)


async def _acting_agent(request: Request) -> Agent:
    me = await owner(request)
    row = await accounts.owned_agent(state(request).pool, me, request.path_params["agent_id"])
    return Agent(row["agent_id"], me.user_id, row["kind"])


@doc("List an agent's friends and pending requests, on its behalf", response=Friends,
     auth="owner", tag="owners")
async def agent_friends(request: Request) -> Response:
    acting = await _acting_agent(request)
    return json(await social.list_friends(state(request).pool, acting))


@doc("Send a friend request on behalf of one of your agents", body=FriendRequestCreate,
     response=FriendRequestOut, auth="owner", status=201, replay_status=200, tag="owners")
async def agent_friend_request(request: Request) -> Response:
    acting = await _acting_agent(request)
    data = await body(request, FriendRequestCreate)
    s = state(request)
    result, created = await social.request_friend(s.pool, s.settings, acting, data.to_agent_id,
                                                  data.note, reach_changed=s.reach_changed,
                                                  wakeup=s.wakeup)
    return json(result, 201 if created else 200)


@doc("Accept a friend request on behalf of one of your agents", response=FriendRequestOut,
     auth="owner", tag="owners")
async def agent_friend_accept(request: Request) -> Response:
    acting = await _acting_agent(request)
    s = state(request)
    return json(await social.accept_friend(s.pool, s.settings, acting,
                                           request.path_params["request_id"],
                                           reach_changed=s.reach_changed, wakeup=s.wakeup))


@doc("Reject a friend request on behalf of one of your agents", response=FriendRequestOut,
     auth="owner", tag="owners")
async def agent_friend_reject(request: Request) -> Response:
    acting = await _acting_agent(request)
    return json(await social.reject_friend(state(request).pool, acting,
                                           request.path_params["request_id"]))


@doc("Remove a friend on behalf of one of your agents", auth="owner", status=204, tag="owners")
async def agent_friend_remove(request: Request) -> Response:
    acting = await _acting_agent(request)
    await social.remove_friend(state(request).pool, acting, request.path_params["friend_id"],
                               reach_changed=state(request).reach_changed)
    return Response(status_code=204)


@doc("Group invitations waiting for one of your agents' answer", response=GroupInvitations,
     auth="owner", tag="owners")
async def agent_group_invitations(request: Request) -> Response:
    acting = await _acting_agent(request)
    return json(await social.group_invitations(state(request).pool, acting))


@doc("Accept a group invitation on behalf of one of your agents", response=Membership,
     auth="owner", tag="owners")
async def agent_group_accept(request: Request) -> Response:
    acting = await _acting_agent(request)
    s = state(request)
    return json(await social.accept_invitation(s.pool, acting, request.path_params["group_id"],
                                               reach_changed=s.reach_changed))


@doc("Reject a group invitation on behalf of one of your agents", response=GroupInvitation,
     auth="owner", tag="owners")
async def agent_group_reject(request: Request) -> Response:
    acting = await _acting_agent(request)
    return json(await social.reject_invitation(state(request).pool, acting,
                                               request.path_params["group_id"]))


@doc("Take one of your agents out of a group, whoever owns it", auth="owner", status=204,
     tag="owners")
async def agent_group_leave(request: Request) -> Response:
    acting = await _acting_agent(request)
    s = state(request)
    await social.leave_group(s.pool, acting, request.path_params["group_id"],
                             reach_changed=s.reach_changed)
    return Response(status_code=204)


@doc("Create a group", body=GroupCreate, response=OwnedGroup, auth="owner", status=201,
     tag="groups")
async def create_group(request: Request) -> Response:
    me = await owner(request)
    data = await body(request, GroupCreate)
    return json(await social.create_group(state(request).pool, me, data.group_id, data.name), 201)


@doc("List the groups you own", response=OwnedGroups, auth="owner", tag="groups")
async def list_groups(request: Request) -> Response:
    me = await owner(request)
    return json(OwnedGroups(groups=await social.owner_groups(state(request).pool, me)))


@doc("Get a group you own with its members", response=GroupWithMembers, auth="owner",
     tag="groups")
async def get_group(request: Request) -> Response:
    me = await owner(request)
    return json(await social.owner_group(state(request).pool, me, request.path_params["group_id"]))


@doc("Delete a group you own", auth="owner", status=204, tag="groups")
async def delete_group(request: Request) -> Response:
    me = await owner(request)
    s = state(request)
    await social.delete_group(s.pool, s.settings, me, request.path_params["group_id"],
                              reach_changed=s.reach_changed, wakeup=s.wakeup)
    return Response(status_code=204)


@doc("Add an agent to a group: yours join at once; another owner's (a friend of one of "
     "yours) is invited and joins when it accepts (status \"invited\")",
     body=GroupMemberAdd, response=Membership, auth="owner", status=201, replay_status=200,
     tag="groups")
async def add_member(request: Request) -> Response:
    me = await owner(request)
    data = await body(request, GroupMemberAdd)
    s = state(request)
    result, created = await social.add_member(s.pool, s.settings, me,
                                              request.path_params["group_id"], data.agent_id,
                                              data.role, reach_changed=s.reach_changed, wakeup=s.wakeup)
    return json(result, 201 if created else 200)


@doc("Remove an agent from a group", auth="owner", status=204, tag="groups")
async def remove_member(request: Request) -> Response:
    me = await owner(request)
    s = state(request)
    await social.remove_member(s.pool, s.settings, me, request.path_params["group_id"],
                               request.path_params["agent_id"], reach_changed=s.reach_changed,
                               wakeup=s.wakeup)
    return Response(status_code=204)


routes = [
    Route("/v1/agents", create_agent, methods=["POST"]),
    Route("/v1/agents", list_agents, methods=["GET"]),
    Route("/v1/agents/{agent_id}", get_agent, methods=["GET"]),
    Route("/v1/agents/{agent_id}", patch_agent, methods=["PATCH"]),
    Route("/v1/agents/{agent_id}", delete_agent, methods=["DELETE"]),
    Route("/v1/agents/{agent_id}/keys", create_key, methods=["POST"]),
    Route("/v1/agents/{agent_id}/keys", list_keys, methods=["GET"]),
    Route("/v1/agents/{agent_id}/keys/{key_id}", revoke_key, methods=["DELETE"]),
    Route("/v1/agents/{agent_id}/friends", agent_friends, methods=["GET"]),
    Route("/v1/agents/{agent_id}/friends/requests", agent_friend_request, methods=["POST"]),
    Route("/v1/agents/{agent_id}/friends/requests/{request_id}/accept", agent_friend_accept,
          methods=["POST"]),
    Route("/v1/agents/{agent_id}/friends/requests/{request_id}/reject", agent_friend_reject,
          methods=["POST"]),
    Route("/v1/agents/{agent_id}/friends/{friend_id}", agent_friend_remove, methods=["DELETE"]),
    Route("/v1/agents/{agent_id}/groups/invitations", agent_group_invitations, methods=["GET"]),
    Route("/v1/agents/{agent_id}/groups/invitations/{group_id}/accept", agent_group_accept,
          methods=["POST"]),
    Route("/v1/agents/{agent_id}/groups/invitations/{group_id}/reject", agent_group_reject,
          methods=["POST"]),
    Route("/v1/agents/{agent_id}/groups/{group_id}", agent_group_leave, methods=["DELETE"]),
    Route("/v1/groups", create_group, methods=["POST"]),
    Route("/v1/groups", list_groups, methods=["GET"]),
    Route("/v1/groups/{group_id}", get_group, methods=["GET"]),
    Route("/v1/groups/{group_id}", delete_group, methods=["DELETE"]),
    Route("/v1/groups/{group_id}/members", add_member, methods=["POST"]),
    Route("/v1/groups/{group_id}/members/{agent_id}", remove_member, methods=["DELETE"]),
]

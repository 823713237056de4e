"""Owner side: agents, API keys, groups, friendships on behalf of own agents."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.api import mesh, teams
from app.domain.schemas import AgentCreate, AgentPatch, GroupCreate, GroupMemberAdd
from app.responses import (
    AgentList,
    AgentOut,
    GroupWithMembers,
    KeyList,
    Membership,
    NewKey,
    OwnedGroup,
    OwnedGroups,
)
from app.services import a2a_remotes, accounts, social
from app.services.principals import Owner
from app.web.endpoint import endpoint, json, on_behalf
from app.web.inputs import body
from app.web.state import state


@endpoint("Create an agent; its agent_id is {name}@{username}. With `a2a` it is served by "
     "an A2A server elsewhere (kind \"a2a\"), forwarded by the a2a-bridge process", body=AgentCreate,
     response=AgentOut, auth="owner", status=201, tag="owners")
async def create_agent(request: Request, me: Owner) -> Response:
    data = await body(request, AgentCreate)
    s = state(request)
    if data.a2a is not None:  # served by an A2A server elsewhere (ADR 041)
        return json(await a2a_remotes.create(s, me, data), 201)
    return json(await accounts.create_agent(s, me, data), 201)


@endpoint("List your agents (including your virtual-user agent)", response=AgentList,
     auth="owner", tag="owners")
async def list_agents(request: Request, me: Owner) -> Response:
    return json(await accounts.list_agents(state(request).pool, me))


@endpoint("Get one of your agents", response=AgentOut, auth="owner", tag="owners")
async def get_agent(request: Request, me: Owner) -> Response:
    pool = state(request).pool
    row = await accounts.owned_agent(pool, me, request.path_params["agent_id"])
    return json(await accounts.agent_view(pool, row))


@endpoint("Change an agent's display name, description, skills, instructions, listing or "
     "daily budget (null removes it)", body=AgentPatch,
     response=AgentOut, auth="owner", tag="owners")
async def patch_agent(request: Request, me: Owner) -> Response:
    data = await body(request, AgentPatch)
    return json(await accounts.patch_agent(state(request), me,
                                           request.path_params["agent_id"], data))


@endpoint("Delete an agent; its keys and tokens stop working at once", auth="owner", status=204,
     tag="owners")
async def delete_agent(request: Request, me: Owner) -> Response:
    s = state(request)
    await accounts.delete_agent(s, me, request.path_params["agent_id"])
    return Response(status_code=204)


@endpoint("Create an API key for an agent; the key is shown only in this response",
     response=NewKey, auth="owner", status=201, tag="owners")
async def create_key(request: Request, me: Owner) -> Response:
    return json(await accounts.create_key(state(request), me,
                                          request.path_params["agent_id"]), 201)


@endpoint("List an agent's API keys (ids and dates, never the keys)", response=KeyList,
     auth="owner", tag="owners")
async def list_keys(request: Request, me: Owner) -> Response:
    keys = await accounts.list_keys(state(request).pool, me, request.path_params["agent_id"])
    return json(KeyList(keys=keys))


@endpoint("Revoke an API key; tokens issued from it stop working at once", auth="owner", status=204,
     tag="owners")
async def revoke_key(request: Request, me: Owner) -> Response:
    s = state(request)
    await accounts.revoke_key(s, me, request.path_params["agent_id"],
                              request.path_params["key_id"])
    return Response(status_code=204)


agent_friends = on_behalf(
    mesh.friends, "List an agent's friends and pending requests, on its behalf")
agent_friend_request = on_behalf(
    mesh.friend_request, "Send a friend request on behalf of one of your agents")
agent_friend_accept = on_behalf(
    mesh.friend_accept, "Accept a friend request on behalf of one of your agents")
agent_friend_reject = on_behalf(
    mesh.friend_reject, "Reject a friend request on behalf of one of your agents")
agent_friend_remove = on_behalf(mesh.friend_remove, "Remove a friend on behalf of one of your agents")
agent_group_invitations = on_behalf(
    teams.group_invitations, "Group invitations waiting for one of your agents' answer")
agent_group_accept = on_behalf(
    teams.accept_group_invitation, "Accept a group invitation on behalf of one of your agents")
agent_group_reject = on_behalf(
    teams.reject_group_invitation, "Reject a group invitation on behalf of one of your agents")
agent_group_leave = on_behalf(
    teams.leave_group, "Take one of your agents out of a group, whoever owns it")


@endpoint("Create a group", body=GroupCreate, response=OwnedGroup, auth="owner", status=201,
     tag="groups")
async def create_group(request: Request, me: Owner) -> Response:
    data = await body(request, GroupCreate)
    return json(await social.create_group(state(request), me, data.group_id, data.name), 201)


@endpoint("List the groups you own", response=OwnedGroups, auth="owner", tag="groups")
async def list_groups(request: Request, me: Owner) -> Response:
    return json(OwnedGroups(groups=await social.owner_groups(state(request).pool, me)))


@endpoint("Get a group you own with its members", response=GroupWithMembers, auth="owner",
     tag="groups")
async def get_group(request: Request, me: Owner) -> Response:
    return json(await social.owner_group(state(request).pool, me, request.path_params["group_id"]))


@endpoint("Delete a group you own", auth="owner", status=204, tag="groups")
async def delete_group(request: Request, me: Owner) -> Response:
    s = state(request)
    await social.delete_group(s, me, request.path_params["group_id"])
    return Response(status_code=204)


@endpoint("Add an agent to a group: yours join at once; another owner's (a friend of one of "
     "yours) is invited and joins when it accepts (status \"invited\")",
     body=GroupMemberAdd, response=Membership, auth="owner", status=201, replay_status=200,
     tag="groups")
async def add_member(request: Request, me: Owner) -> Response:
    data = await body(request, GroupMemberAdd)
    s = state(request)
    result, created = await social.add_member(s, me, request.path_params["group_id"],
                                              data.agent_id, data.role)
    return json(result, 201 if created else 200)


@endpoint("Remove an agent from a group", auth="owner", status=204, tag="groups")
async def remove_member(request: Request, me: Owner) -> Response:
    s = state(request)
    await social.remove_member(s, me, request.path_params["group_id"],
                               request.path_params["agent_id"])
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

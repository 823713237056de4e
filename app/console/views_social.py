"""Friends of my agents (send, accept, reject, remove), my groups (create,
members and their roles, roster, delete), and my agents' group invitations and
memberships (accept, reject, leave)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import Response

from app.console.owned import actor, as_actor, my_agents
from app.console.web import ActionError, Ctx, action, back, page, validated
from app.domain.schemas import FriendRequestCreate, GroupCreate, GroupMemberAdd
from app.platform.errors import Problem
from app.services import social
from app.services.mesh import Mesh
from app.services.principals import Agent

# A service call that answers for an agent: (mesh, the agent, what it answers).
Answer = Callable[[Mesh, Agent, str], Awaitable[Any]]


async def friends_page(ctx: Ctx, *, error: ActionError | None = None, status: int = 200) -> Response:
    agents = await my_agents(ctx)
    rows = [(a, await social.list_friends(ctx.state.pool, as_actor(ctx, a))) for a in agents]
    return ctx.render("friends.html", status=status, error=error, nav="friends", rows=rows,
                      agents=agents)


@page
async def friends(ctx: Ctx) -> Response:
    return await friends_page(ctx)


@action("friend-request", friends_page)
async def send_request(ctx: Ctx) -> Response:
    who = await actor(ctx, ctx.form.get("agent_id", ""))
    body = validated(FriendRequestCreate, {"to_agent_id": ctx.form.get("to_agent_id", "").strip(),
                                           "note": ctx.form.get("note") or None})
    s = ctx.state
    await social.request_friend(s, who, body.to_agent_id, body.note)
    return back("/console/friends?sent=1")


async def _answer(ctx: Ctx, accept: Answer, reject: Answer, subject: str, page: str) -> Response:
    """An agent's accept or reject (the path's ``verb``) of the ``subject`` path
    parameter (a friend request, a group invitation); then back to ``page``."""
    who = await actor(ctx, ctx.path("agent_id"))
    verb = ctx.path("verb")
    answers = {"accept": accept, "reject": reject}
    if verb not in answers:
        raise Problem(404, f"no such answer '{verb}'; accept or reject")
    await answers[verb](ctx.state, who, ctx.path(subject))
    return back(page)


@action("friend-answer", friends_page)
async def answer_request(ctx: Ctx) -> Response:
    return await _answer(ctx, social.accept_friend, social.reject_friend, "request_id",
                         "/console/friends")


@action("friend-remove", friends_page)
async def remove_friend(ctx: Ctx) -> Response:
    who = await actor(ctx, ctx.path("agent_id"))
    await social.remove_friend(ctx.state, who, ctx.path("friend_id"))
    return back("/console/friends")


async def groups_page(ctx: Ctx, *, error: ActionError | None = None, status: int = 200) -> Response:
    pool = ctx.state.pool
    groups = await social.owner_groups(pool, ctx.owner)
    # Each of my agents' invitations and groups, whoever owns them: answered and
    # left from here (ADR 030).
    invitations, joined = [], []
    for a in await my_agents(ctx):
        who = as_actor(ctx, a)
        invitations += [(a, i) for i in (await social.group_invitations(pool, who)).invitations]
        joined += [(a, g) for g in await social.agent_groups(pool, who)]
    return ctx.render("groups.html", status=status, error=error, nav="groups", groups=groups,
                      invitations=invitations, joined=joined)


@page
async def groups(ctx: Ctx) -> Response:
    return await groups_page(ctx)


@action("create-group", groups_page)
async def create_group(ctx: Ctx) -> Response:
    body = validated(GroupCreate, {"group_id": ctx.form.get("group_id", "").strip(),
                                   "name": ctx.form.get("name", "").strip()})
    await social.create_group(ctx.state, ctx.owner, body.group_id, body.name)
    return back(f"/console/groups/{body.group_id}")


async def group_page(ctx: Ctx, *, error: ActionError | None = None, status: int = 200) -> Response:
    group = await social.owner_group(ctx.state.pool, ctx.owner, ctx.path("group_id"))
    agents = await my_agents(ctx)
    candidates = {a.agent_id for a in agents}
    for a in agents:
        candidates |= {f.agent_id for f in (await social.list_friends(ctx.state.pool,
                                                                      as_actor(ctx, a))).friends}
    members = {m.agent_id for m in group.members}
    invited = (await social.owner_group_invitations(ctx.state.pool, ctx.owner,
                                                    group.group_id)).invitations
    return ctx.render("group.html", status=status, error=error, nav="groups", group=group,
                      invited=invited, candidates=sorted(candidates - members))


@page
async def group(ctx: Ctx) -> Response:
    return await group_page(ctx)


@action("add-member", group_page)
async def add_member(ctx: Ctx) -> Response:
    group_id = ctx.path("group_id")
    body = validated(GroupMemberAdd, {"agent_id": ctx.form.get("agent_id", "").strip(),
                                      "role": ctx.form.get("role") or "member"})
    s = ctx.state
    await social.add_member(s, ctx.owner, group_id, body.agent_id, body.role)
    return back(f"/console/groups/{group_id}")


@action("remove-member", group_page)
async def remove_member(ctx: Ctx) -> Response:
    group_id = ctx.path("group_id")
    s = ctx.state
    await social.remove_member(s, ctx.owner, group_id, ctx.path("agent_id"))
    return back(f"/console/groups/{group_id}")


@action("delete-group", group_page)
async def delete_group(ctx: Ctx) -> Response:
    s = ctx.state
    await social.delete_group(s, ctx.owner, ctx.path("group_id"))
    return back("/console/groups")


@action("group-invitation", groups_page)
async def answer_invitation(ctx: Ctx) -> Response:
    return await _answer(ctx, social.accept_invitation, social.reject_invitation, "group_id",
                         "/console/groups")


@action("group-leave", groups_page)
async def leave_group(ctx: Ctx) -> Response:
    who = await actor(ctx, ctx.path("agent_id"))
    await social.leave_group(ctx.state, who, ctx.path("group_id"))
    return back("/console/groups")

"""Friend requests and groups: the relationships ``can_communicate`` reads."""

from __future__ import annotations

from typing import Any

import asyncpg

from app.domain import ids
from app.domain.permissions import can_communicate, implicitly_friends
from app.platform.errors import Problem, bad_request, conflict, forbidden, not_found
from app.platform.settings import Settings
from app.responses import (
    AgentCard,
    Friend,
    FriendRequestOut,
    Friends,
    GroupInvitation,
    GroupInvitations,
    GroupWithMembers,
    MemberGroup,
    Membership,
    OwnedGroup,
    PendingRequest,
    RosterEntry,
)
from app.services.mesh import Mesh
from app.services.principals import Agent, Owner
from app.services.reach_cache import ReachChanged
from app.store import agents as agents_store
from app.store import directory as directory_store
from app.store import social as social_store
from app.store.writes import NewEvent, RecipientMissing, Writes, writes


def friend_request(row: asyncpg.Record, **override: Any) -> FriendRequestOut:
    target = row["agent_b"] if row["agent_a"] == row["requester"] else row["agent_a"]
    return FriendRequestOut.of(row, from_agent_id=row["requester"], to_agent_id=target,
                               **override)


async def _notify(tx: Writes, event: NewEvent) -> None:
    try:
        await tx.append([event])
    except RecipientMissing:  # deleted while this request ran
        raise not_found(f"unknown agent '{event.agent_id}'") from None


# --- friends -----------------------------------------------------------------------

async def request_friend(mesh: Mesh, me: Agent, to: str,
                         note: str | None) -> tuple[FriendRequestOut, bool]:
    """Returns (request, created). A request to an agent that already asked us
    accepts theirs: both sides want the friendship.

    Every write here that changes who may reach whom runs ``mesh.reach_changed()``
    after its commit (the web processes' relationship caches, app.services.reach_cache)."""
    if to == me.agent_id:
        raise bad_request("an agent cannot befriend itself")
    async with writes(mesh.pool, topic=mesh.settings.bus_topic, wakeup=mesh.wakeup) as tx:
        conn = tx.conn
        if await agents_store.get(conn, to) is None:
            raise not_found(f"unknown agent '{to}'")
        existing = await social_store.get_friendship(conn, me.agent_id, to)
        if existing is not None:
            return await _answer_existing(tx, me, to, existing, mesh.reach_changed), False
        await _check_pending_limit(conn, mesh.settings, me)
        row = await social_store.create_request(conn, ids.new_request_id(), me.agent_id, to,
                                                note or "")
        if row is None:
            # The other agent asked us at the same moment (its insert won the
            # unique pair): now committed and visible, so treat it like any
            # request that was there first.
            existing = await social_store.get_friendship(conn, me.agent_id, to)
            if existing is None:  # …and already gone again (rejected, removed)
                raise conflict(f"a friend request between '{me.agent_id}' and '{to}' changed "
                               "concurrently; retry")
            return await _answer_existing(tx, me, to, existing, mesh.reach_changed), False
        out = friend_request(row)
        await _notify(tx, NewEvent(
            agent_id=to, type="friend.request", from_agent_id=me.agent_id,
            payload={"request": out.wire()}))
        return out, True


async def _check_pending_limit(conn: asyncpg.Connection, settings: Settings, me: Agent) -> None:
    await directory_store.serialize_requests_of(conn, me.agent_id)
    pending = await directory_store.pending_outgoing(conn, me.agent_id)
    if pending >= settings.friend_requests_pending_max:
        raise Problem(429, f"'{me.agent_id}' has {pending} friend requests pending, the most "
                      "allowed at once; wait for answers before sending more",
                      pending=pending, limit=settings.friend_requests_pending_max)


async def _answer_existing(tx: Writes, me: Agent, to: str, existing: asyncpg.Record,
                           reach_changed: ReachChanged) -> FriendRequestOut:
    if existing["status"] == "accepted":
        raise conflict(f"'{me.agent_id}' and '{to}' are already friends",
                       request_id=existing["request_id"])
    if existing["requester"] == me.agent_id:
        raise conflict(f"a friend request to '{to}' is already pending",
                       request_id=existing["request_id"])
    return await _accept(tx, existing, reach_changed)


async def _accept(tx: Writes, pending: asyncpg.Record,
                  reach_changed: ReachChanged) -> FriendRequestOut:
    row = await social_store.accept(tx.conn, pending["request_id"])
    assert row is not None
    tx.after_commit(reach_changed)
    out = friend_request(row)
    await _notify(tx, NewEvent(
        agent_id=row["requester"], type="friend.accepted", from_agent_id=out.to_agent_id,
        payload={"request": out.wire()}))
    return out


async def _pending_for(conn: asyncpg.Connection, me: Agent, request_id: str) -> asyncpg.Record:
    row = await social_store.request_by_id(conn, request_id)
    if row is None or me.agent_id not in (row["agent_a"], row["agent_b"]):
        raise not_found(f"no friend request '{request_id}' addressed to you")
    if row["status"] != "pending":
        raise conflict(f"friend request '{request_id}' was already accepted")
    if row["requester"] == me.agent_id:
        raise forbidden("only the agent a request was sent to can answer it")
    return row


async def accept_friend(mesh: Mesh, me: Agent, request_id: str) -> FriendRequestOut:
    async with writes(mesh.pool, topic=mesh.settings.bus_topic, wakeup=mesh.wakeup) as tx:
        return await _accept(tx, await _pending_for(tx.conn, me, request_id),
                             mesh.reach_changed)


async def reject_friend(mesh: Mesh, me: Agent, request_id: str) -> FriendRequestOut:
    async with mesh.pool.acquire() as conn, conn.transaction():
        row = await _pending_for(conn, me, request_id)
        await social_store.delete_request(conn, request_id)
        return friend_request(row, status="rejected")


async def remove_friend(mesh: Mesh, me: Agent, other: str) -> None:
    if not await social_store.delete_friendship(mesh.pool, me.agent_id, other):
        raise not_found(f"'{other}' is not a friend of '{me.agent_id}'")
    await mesh.reach_changed()  # the delete committed on its own


async def list_friends(pool: asyncpg.Pool, me: Agent) -> Friends:
    async with pool.acquire() as conn:
        rows = await social_store.friends_of(conn, me.agent_id)
        siblings = await social_store.same_owner_agents(conn, me.agent_id)
        pending = await social_store.requests_of(conn, me.agent_id)
    friends = [Friend.of(r, implicit=False) for r in rows]
    explicit = {f.agent_id for f in friends}
    friends += [Friend.of(r, since=None, implicit=True) for r in siblings
                if r["agent_id"] not in explicit and implicitly_friends(same_owner=True)]
    return Friends(
        friends=friends,
        incoming_requests=[_pending(r) for r in pending if r["requester"] != me.agent_id],
        outgoing_requests=[_pending(r) for r in pending if r["requester"] == me.agent_id])


def _pending(r: asyncpg.Record) -> PendingRequest:
    return PendingRequest.of(r, from_agent_id=r["requester"], to_agent_id=r["target"])


# --- groups ---------------------------------------------------------------------------

async def create_group(mesh: Mesh, owner: Owner, group_id: str, name: str) -> OwnedGroup:
    row = await social_store.create_group(mesh.pool, group_id, name, owner.user_id)
    if row is None:
        raise conflict(f"group_id '{group_id}' is taken; choose another")
    return OwnedGroup.of(row, member_count=0)


async def _owned_group(conn: asyncpg.Connection | asyncpg.Pool, owner: Owner,
                       group_id: str) -> asyncpg.Record:
    row = await social_store.get_group(conn, group_id)
    if row is None or row["owner_id"] != owner.user_id:
        raise not_found(f"no group '{group_id}' owned by you")
    return row


async def add_member(mesh: Mesh, owner: Owner, group_id: str, agent_id: str,
                     role: str) -> tuple[Membership, bool]:
    """One's own agent joins at once; another owner's agent is invited (ADR 030)
    and joins only when it or its owner accepts. Returns (membership, created)."""
    async with writes(mesh.pool, topic=mesh.settings.bus_topic, wakeup=mesh.wakeup) as tx:
        conn = tx.conn
        group = await _owned_group(conn, owner, group_id)
        agent = await agents_store.get(conn, agent_id)
        if agent is None:
            raise not_found(f"unknown agent '{agent_id}'")
        if agent["owner_id"] == owner.user_id:
            row = await social_store.add_member(conn, group_id, agent_id, role)
            if row["inserted"]:
                tx.after_commit(mesh.reach_changed)
                await _group_notice(tx, agent_id, group, "added", role=role)
            return Membership.of(row, status="member"), bool(row["inserted"])
        # Only an agent already befriended by one of this owner's agents may even
        # be invited: an invitation is not a way to reach strangers.
        if not await social_store.owner_friend_of(conn, owner.user_id, agent_id):
            raise forbidden(f"'{agent_id}' belongs to another owner and is not a friend of any "
                            "of your agents; befriend it first")
        member = await social_store.update_role(conn, group_id, agent_id, role)
        if member is not None:
            return Membership.of(member, status="member"), False
        invited = await social_store.invite(conn, group_id, agent_id, role)
        if invited["inserted"]:
            await _group_notice(tx, agent_id, group, "invited", role=role)
        return Membership(group_id=group_id, agent_id=agent_id, role=invited["role"],
                          joined_at=None, status="invited"), bool(invited["inserted"])


async def _group_notice(tx: Writes, agent_id: str, group: asyncpg.Record, notice: str,
                        **extra: Any) -> None:
    await _notify(tx, NewEvent(
        agent_id=agent_id, type="group.notice", from_agent_id=None,
        payload={"group_id": group["group_id"], "name": group["name"], "notice": notice,
                 **extra}))


async def remove_member(mesh: Mesh, owner: Owner, group_id: str, agent_id: str) -> None:
    """Remove a member, or withdraw a pending invitation."""
    async with writes(mesh.pool, topic=mesh.settings.bus_topic, wakeup=mesh.wakeup) as tx:
        group = await _owned_group(tx.conn, owner, group_id)
        if await social_store.remove_member(tx.conn, group_id, agent_id):
            tx.after_commit(mesh.reach_changed)
            notice = "removed"
        elif await social_store.cancel_invitation(tx.conn, group_id, agent_id):
            notice = "invitation-withdrawn"
        else:
            raise not_found(f"'{agent_id}' is not a member of '{group_id}'")
        await tx.append([NewEvent(
            agent_id=agent_id, type="group.notice", from_agent_id=None,
            payload={"group_id": group_id, "name": group["name"], "notice": notice})],
            skip_missing=True)


async def group_invitations(pool: asyncpg.Pool, me: Agent) -> GroupInvitations:
    rows = await social_store.invitations_of(pool, me.agent_id)
    return GroupInvitations(invitations=[GroupInvitation.of(r, status="invited") for r in rows])


async def accept_invitation(mesh: Mesh, me: Agent, group_id: str) -> Membership:
    async with mesh.pool.acquire() as conn, conn.transaction():
        invitation = await _invitation_for(conn, me, group_id)
        row = await social_store.add_member(conn, group_id, me.agent_id, invitation["role"])
    await mesh.reach_changed()  # after the commit: the new member now shares the group
    return Membership.of(row, status="member")


async def reject_invitation(mesh: Mesh, me: Agent, group_id: str) -> GroupInvitation:
    invitation = await _invitation_for(mesh.pool, me, group_id)
    return GroupInvitation.of(invitation, status="rejected")


async def _invitation_for(conn: asyncpg.Connection | asyncpg.Pool, me: Agent,
                          group_id: str) -> asyncpg.Record:
    row = await social_store.take_invitation(conn, group_id, me.agent_id)
    if row is None:
        raise not_found(f"no invitation to group '{group_id}' for '{me.agent_id}'")
    return row


async def leave_group(mesh: Mesh, me: Agent, group_id: str) -> None:
    """Any member may leave, whoever's group it is (ADR 030)."""
    if not await social_store.remove_member(mesh.pool, group_id, me.agent_id):
        raise not_found(f"no group '{group_id}' that you are a member of")
    await mesh.reach_changed()  # the delete committed on its own


async def owner_group_invitations(pool: asyncpg.Pool, owner: Owner,
                                  group_id: str) -> GroupInvitations:
    """The pending invitations of a group ``owner`` owns."""
    async with pool.acquire() as conn:
        await _owned_group(conn, owner, group_id)
        rows = await social_store.invited_to(conn, group_id)
    return GroupInvitations(invitations=[GroupInvitation.of(r, status="invited") for r in rows])


async def owner_groups(pool: asyncpg.Pool, owner: Owner) -> list[OwnedGroup]:
    return [OwnedGroup.of(r) for r in await social_store.groups_owned(pool, owner.user_id)]


async def owner_group(pool: asyncpg.Pool, owner: Owner, group_id: str) -> GroupWithMembers:
    async with pool.acquire() as conn:
        group = await _owned_group(conn, owner, group_id)
        members = await social_store.roster(conn, group_id)
    return GroupWithMembers.of(group, members=[RosterEntry.of(m) for m in members])


async def delete_group(mesh: Mesh, owner: Owner, group_id: str) -> None:
    """Delete a group and tell its members (one group.notice each) in the same
    transaction: members learn they no longer share it."""
    async with writes(mesh.pool, topic=mesh.settings.bus_topic, wakeup=mesh.wakeup) as tx:
        group = await _owned_group(tx.conn, owner, group_id)
        tx.after_commit(mesh.reach_changed)
        members = await social_store.member_ids(tx.conn, group_id)
        await social_store.delete_group(tx.conn, group_id, owner.user_id)
        await tx.append([
            NewEvent(agent_id=m, type="group.notice", from_agent_id=None,
                     payload={"group_id": group_id, "name": group["name"], "notice": "deleted"})
            for m in sorted(members)], skip_missing=True)


async def agent_groups(pool: asyncpg.Pool, me: Agent) -> list[MemberGroup]:
    return [MemberGroup.of(r) for r in await social_store.groups_of(pool, me.agent_id)]


async def roster(pool: asyncpg.Pool, me: Agent, group_id: str) -> GroupWithMembers:
    async with pool.acquire() as conn:
        if not await social_store.is_member(conn, group_id, me.agent_id):
            raise not_found(f"no group '{group_id}' that you are a member of")
        group = await social_store.get_group(conn, group_id)
        members = await social_store.roster(conn, group_id)
    assert group is not None
    return GroupWithMembers.of(group, members=[RosterEntry.of(m) for m in members])


# --- cards ------------------------------------------------------------------------------

async def agent_card(pool: asyncpg.Pool, me: Agent, agent_id: str) -> AgentCard:
    async with pool.acquire() as conn:
        agent = await agents_store.get(conn, agent_id)
        if agent is None:
            raise not_found(f"unknown agent '{agent_id}'")
        if agent_id != me.agent_id:
            rel = await social_store.relationship(conn, me.agent_id, agent_id)
            if not can_communicate(rel):
                raise forbidden(f"you may not talk to '{agent_id}', so its card is not shown; "
                                "become friends or share a group first")
    return card_json(agent)


def card_json(agent: asyncpg.Record) -> AgentCard:
    """An A2A-style agent card. There is no URL to call: the mesh is the transport."""
    return AgentCard(
        agent_id=agent["agent_id"], name=agent["display_name"] or agent["name"],
        description=agent["description"], kind=agent["kind"], status=agent["status"],
        last_heartbeat_at=agent["last_heartbeat_at"], version="1",
        capabilities={"streaming": True, "pushNotifications": True},
        defaultInputModes=["text", "data", "file"], defaultOutputModes=["text", "data", "file"],
        skills=agent["skills"] or [])

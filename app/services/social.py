"""Friend requests and groups: the relationships ``can_communicate`` reads."""

from __future__ import annotations

from typing import Any

import asyncpg

from app import ids
from app.domain.permissions import can_communicate
from app.errors import bad_request, conflict, forbidden, not_found
from app.services.principals import Agent, Owner
from app.settings import Settings
from app.store import agents as agents_store
from app.store import events as events_store
from app.store import social as social_store
from app.store.events import NewEvent


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def request_json(row: asyncpg.Record) -> dict[str, Any]:
    target = row["agent_b"] if row["agent_a"] == row["requester"] else row["agent_a"]
    return {"request_id": row["request_id"], "from_agent_id": row["requester"],
            "to_agent_id": target, "note": row["note"], "status": row["status"],
            "created_at": _iso(row["created_at"]), "accepted_at": _iso(row["accepted_at"])}


async def _notify(conn: asyncpg.Connection, settings: Settings, event: NewEvent) -> None:
    try:
        await events_store.append(conn, [event], topic=settings.bus_topic)
    except events_store.RecipientMissing:  # deleted while this request ran
        raise not_found(f"unknown agent '{event.agent_id}'") from None


# --- friends -----------------------------------------------------------------------

async def request_friend(pool: asyncpg.Pool, settings: Settings, me: Agent, to: str,
                         note: str | None) -> tuple[dict[str, Any], bool]:
    """Returns (request, created). A request to an agent that already asked us
    accepts theirs: both sides want the friendship."""
    if to == me.agent_id:
        raise bad_request("an agent cannot befriend itself")
    async with pool.acquire() as conn, conn.transaction():
        if await agents_store.get(conn, to) is None:
            raise not_found(f"unknown agent '{to}'")
        existing = await social_store.get_friendship(conn, me.agent_id, to)
        if existing is not None:
            return await _answer_existing(conn, settings, me, to, existing), False
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
            return await _answer_existing(conn, settings, me, to, existing), False
        await _notify(conn, settings, NewEvent(
            agent_id=to, type="friend.request", from_agent_id=me.agent_id,
            payload={"request": request_json(row)}))
        return request_json(row), True


async def _answer_existing(conn: asyncpg.Connection, settings: Settings, me: Agent, to: str,
                           existing: asyncpg.Record) -> dict[str, Any]:
    if existing["status"] == "accepted":
        raise conflict(f"'{me.agent_id}' and '{to}' are already friends",
                       request_id=existing["request_id"])
    if existing["requester"] == me.agent_id:
        raise conflict(f"a friend request to '{to}' is already pending",
                       request_id=existing["request_id"])
    return await _accept(conn, settings, existing)


async def _accept(conn: asyncpg.Connection, settings: Settings,
                  pending: asyncpg.Record) -> dict[str, Any]:
    row = await social_store.accept(conn, pending["request_id"])
    assert row is not None
    accepter = row["agent_b"] if row["agent_a"] == row["requester"] else row["agent_a"]
    await _notify(conn, settings, NewEvent(
        agent_id=row["requester"], type="friend.accepted", from_agent_id=accepter,
        payload={"request": request_json(row)}))
    return request_json(row)


async def _pending_for(conn: asyncpg.Connection, me: Agent, request_id: str) -> asyncpg.Record:
    row = await social_store.request_by_id(conn, request_id)
    if row is None or me.agent_id not in (row["agent_a"], row["agent_b"]):
        raise not_found(f"no friend request '{request_id}' addressed to you")
    if row["status"] != "pending":
        raise conflict(f"friend request '{request_id}' was already accepted")
    if row["requester"] == me.agent_id:
        raise forbidden("only the agent a request was sent to can answer it")
    return row


async def accept_friend(pool: asyncpg.Pool, settings: Settings, me: Agent,
                        request_id: str) -> dict[str, Any]:
    async with pool.acquire() as conn, conn.transaction():
        return await _accept(conn, settings, await _pending_for(conn, me, request_id))


async def reject_friend(pool: asyncpg.Pool, me: Agent, request_id: str) -> dict[str, Any]:
    async with pool.acquire() as conn, conn.transaction():
        row = await _pending_for(conn, me, request_id)
        await social_store.delete_request(conn, request_id)
        return {**request_json(row), "status": "rejected"}


async def remove_friend(pool: asyncpg.Pool, me: Agent, other: str) -> None:
    if not await social_store.delete_friendship(pool, me.agent_id, other):
        raise not_found(f"'{other}' is not a friend of '{me.agent_id}'")


async def list_friends(pool: asyncpg.Pool, me: Agent) -> dict[str, Any]:
    async with pool.acquire() as conn:
        rows = await social_store.friends_of(conn, me.agent_id)
        implicit = await social_store.implicit_friends(conn, me.agent_id)
        pending = await social_store.requests_of(conn, me.agent_id)
    friends = [{"agent_id": r["agent_id"], "display_name": r["display_name"],
                "status": r["status"], "kind": r["kind"], "since": _iso(r["since"]),
                "implicit": False} for r in rows]
    friends += [{"agent_id": r["agent_id"], "display_name": r["display_name"],
                 "status": r["status"], "kind": r["kind"], "since": None, "implicit": True}
                for r in implicit if r["agent_id"] not in {f["agent_id"] for f in friends}]
    return {
        "friends": friends,
        "incoming_requests": [_pending_json(r) for r in pending if r["requester"] != me.agent_id],
        "outgoing_requests": [_pending_json(r) for r in pending if r["requester"] == me.agent_id],
    }


def _pending_json(r: asyncpg.Record) -> dict[str, Any]:
    return {"request_id": r["request_id"], "from_agent_id": r["requester"],
            "to_agent_id": r["target"], "note": r["note"], "created_at": _iso(r["created_at"])}


# --- groups ---------------------------------------------------------------------------

def group_json(row: asyncpg.Record) -> dict[str, Any]:
    out = {"group_id": row["group_id"], "name": row["name"]}
    for key in ("role", "member_count"):
        if key in row:
            out[key] = row[key]
    if "created_at" in row:
        out["created_at"] = _iso(row["created_at"])
    return out


async def create_group(pool: asyncpg.Pool, owner: Owner, group_id: str, name: str) -> dict[str, Any]:
    row = await social_store.create_group(pool, group_id, name, owner.user_id)
    if row is None:
        raise conflict(f"group_id '{group_id}' is taken; choose another")
    return {**group_json(row), "member_count": 0}


async def _owned_group(conn: asyncpg.Connection | asyncpg.Pool, owner: Owner,
                       group_id: str) -> asyncpg.Record:
    row = await social_store.get_group(conn, group_id)
    if row is None or row["owner_id"] != owner.user_id:
        raise not_found(f"no group '{group_id}' owned by you")
    return row


async def add_member(pool: asyncpg.Pool, settings: Settings, owner: Owner, group_id: str,
                     agent_id: str, role: str) -> tuple[dict[str, Any], bool]:
    async with pool.acquire() as conn, conn.transaction():
        group = await _owned_group(conn, owner, group_id)
        agent = await agents_store.get(conn, agent_id)
        if agent is None:
            raise not_found(f"unknown agent '{agent_id}'")
        # Another owner's agent may be added only with consent already given:
        # friendship with one of this owner's agents. Otherwise a group would be
        # a way around the friend-request boundary.
        if agent["owner_id"] != owner.user_id and \
                not await social_store.owner_friend_of(conn, owner.user_id, agent_id):
            raise forbidden(f"'{agent_id}' belongs to another owner and is not a friend of any "
                            "of your agents; befriend it first")
        row = await social_store.add_member(conn, group_id, agent_id, role)
        if row["inserted"]:
            await _notify(conn, settings, NewEvent(
                agent_id=agent_id, type="group.notice", from_agent_id=None,
                payload={"group_id": group_id, "name": group["name"], "notice": "added",
                         "role": role}))
        return {"group_id": group_id, "agent_id": agent_id, "role": row["role"],
                "joined_at": _iso(row["joined_at"])}, bool(row["inserted"])


async def remove_member(pool: asyncpg.Pool, settings: Settings, owner: Owner, group_id: str,
                        agent_id: str) -> None:
    async with pool.acquire() as conn, conn.transaction():
        group = await _owned_group(conn, owner, group_id)
        if not await social_store.remove_member(conn, group_id, agent_id):
            raise not_found(f"'{agent_id}' is not a member of '{group_id}'")
        await events_store.append(conn, [NewEvent(
            agent_id=agent_id, type="group.notice", from_agent_id=None,
            payload={"group_id": group_id, "name": group["name"], "notice": "removed"})],
            topic=settings.bus_topic, skip_missing=True)


async def owner_groups(pool: asyncpg.Pool, owner: Owner) -> list[dict[str, Any]]:
    return [group_json(r) for r in await social_store.groups_owned(pool, owner.user_id)]


async def owner_group(pool: asyncpg.Pool, owner: Owner, group_id: str) -> dict[str, Any]:
    async with pool.acquire() as conn:
        group = await _owned_group(conn, owner, group_id)
        members = await social_store.roster(conn, group_id)
    return {**group_json(group), "members": [roster_json(m) for m in members]}


async def delete_group(pool: asyncpg.Pool, settings: Settings, owner: Owner,
                       group_id: str) -> None:
    """Delete a group and tell its members (one group.notice each) in the same
    transaction: members learn they no longer share it."""
    async with pool.acquire() as conn, conn.transaction():
        group = await _owned_group(conn, owner, group_id)
        members = await social_store.member_ids(conn, group_id)
        await social_store.delete_group(conn, group_id, owner.user_id)
        await events_store.append(conn, [
            NewEvent(agent_id=m, type="group.notice", from_agent_id=None,
                     payload={"group_id": group_id, "name": group["name"], "notice": "deleted"})
            for m in sorted(members)], topic=settings.bus_topic, skip_missing=True)


def roster_json(r: asyncpg.Record) -> dict[str, Any]:
    return {"agent_id": r["agent_id"], "role": r["role"], "joined_at": _iso(r["joined_at"]),
            "display_name": r["display_name"], "description": r["description"],
            "status": r["status"], "kind": r["kind"],
            "last_heartbeat_at": _iso(r["last_heartbeat_at"])}


async def agent_groups(pool: asyncpg.Pool, me: Agent) -> list[dict[str, Any]]:
    return [group_json(r) for r in await social_store.groups_of(pool, me.agent_id)]


async def roster(pool: asyncpg.Pool, me: Agent, group_id: str) -> dict[str, Any]:
    async with pool.acquire() as conn:
        if not await social_store.is_member(conn, group_id, me.agent_id):
            raise not_found(f"no group '{group_id}' that you are a member of")
        group = await social_store.get_group(conn, group_id)
        members = await social_store.roster(conn, group_id)
    assert group is not None
    return {**group_json(group), "members": [roster_json(m) for m in members]}


# --- cards ------------------------------------------------------------------------------

async def agent_card(pool: asyncpg.Pool, me: Agent, agent_id: str) -> dict[str, Any]:
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


def card_json(agent: asyncpg.Record) -> dict[str, Any]:
    """An A2A-style agent card. There is no URL to call: the mesh is the transport."""
    skills = agent["skills"] or []
    return {
        "agent_id": agent["agent_id"],
        "name": agent["display_name"] or agent["name"],
        "description": agent["description"],
        "kind": agent["kind"],
        "status": agent["status"],
        "last_heartbeat_at": _iso(agent["last_heartbeat_at"]),
        "version": "1",
        "capabilities": {"streaming": True, "pushNotifications": False},
        "defaultInputModes": ["text", "data", "file"],
        "defaultOutputModes": ["text", "data", "file"],
        "skills": skills,
    }

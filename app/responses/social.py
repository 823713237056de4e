"""Response bodies: friends and groups."""

from __future__ import annotations

from typing import Literal

from app.responses.base import Out, Timestamp


class FriendRequestOut(Out):
    request_id: str
    from_agent_id: str
    to_agent_id: str
    note: str | None
    status: Literal["pending", "accepted", "rejected"]
    created_at: Timestamp
    accepted_at: Timestamp | None


class Friend(Out):
    agent_id: str
    display_name: str
    status: str
    kind: str
    since: Timestamp | None
    implicit: bool


class PendingRequest(Out):
    request_id: str
    from_agent_id: str
    to_agent_id: str
    note: str | None
    created_at: Timestamp


class Friends(Out):
    friends: list[Friend]
    incoming_requests: list[PendingRequest]
    outgoing_requests: list[PendingRequest]


class RosterEntry(Out):
    agent_id: str
    role: str
    joined_at: Timestamp
    display_name: str
    description: str
    status: str
    kind: str
    last_heartbeat_at: Timestamp | None


class GroupOut(Out):
    group_id: str
    name: str
    created_at: Timestamp


class OwnedGroup(GroupOut):
    member_count: int


class GroupWithMembers(GroupOut):
    members: list[RosterEntry]


class OwnedGroups(Out):
    groups: list[OwnedGroup]


class MemberGroup(Out):
    """A group as one of its members sees it in ``GET /v1/mesh/groups``."""
    group_id: str
    name: str
    role: str
    member_count: int


class MemberGroups(Out):
    groups: list[MemberGroup]


class Membership(Out):
    """``status`` "member": in the group since ``joined_at``; "invited": another
    owner's agent, asked (a group.notice "invited"), a member once it accepts."""
    group_id: str
    agent_id: str
    role: str
    joined_at: Timestamp | None
    status: str


class GroupInvitation(Out):
    """A group an agent is invited to; ``status`` "rejected" in a reject's answer."""
    group_id: str
    name: str
    agent_id: str
    role: str
    invited_at: Timestamp
    status: str


class GroupInvitations(Out):
    invitations: list[GroupInvitation]

"""Response bodies: the one description of every JSON shape the API returns.

Each model lists exactly the fields a client sees; building one from a database
row (``Model.of(row)``) drops the columns that are not part of the API. The
same models document ``/openapi.json`` (``@doc(..., response=Model)``) and
build the ``task``/``message``/``artifact``/``request`` objects inside event
payloads (``model_dump(mode="json")``), so an object has one shape wherever it
travels.

Timestamps are serialized one way everywhere, by the function that writes an
inbox event's ``created_at`` (``app.domain.event_wire.format_timestamp``): ISO 8601 in
UTC with microseconds (``2026-01-02T03:04:05.123456+00:00``), not pydantic's
``Z`` form.
"""

from __future__ import annotations

from app.responses.accounts import (
    A2ARemoteOut,
    AgentCard,
    AgentList,
    AgentOut,
    AgentToken,
    KeyInfo,
    KeyList,
    NewKey,
    OwnerToken,
    Presence,
    Registered,
)
from app.responses.admin import (
    DeadLetter,
    DeadLetterEnvelope,
    DeadLetters,
    OutboxOverview,
    RetriedAll,
    RetriedOne,
)
from app.responses.base import Json, Out, Parts, Timestamp
from app.responses.inbox import Acked, Claimed, InboxEvent, InboxPage
from app.responses.publications import PublicationOut, PublicationPage
from app.responses.social import (
    Friend,
    FriendRequestOut,
    Friends,
    GroupInvitation,
    GroupInvitations,
    GroupOut,
    GroupWithMembers,
    MemberGroup,
    MemberGroups,
    Membership,
    OwnedGroup,
    OwnedGroups,
    PendingRequest,
    RosterEntry,
)
from app.responses.tasks import (
    ArtifactOut,
    MessageOut,
    Receipt,
    TaskDetail,
    TaskMessage,
    TaskOut,
    TaskPage,
    TaskWithMessage,
)
from app.responses.teams import (
    BroadcastOut,
    BroadcastRecipient,
    ContextTimeline,
    DirectoryEntry,
    DirectoryPage,
    GroupMessageOut,
    StateChangeOut,
    Timeline,
    TimelineEntry,
    TimelineMessage,
)

__all__ = [
    "A2ARemoteOut",
    "Acked",
    "AgentCard",
    "AgentList",
    "AgentOut",
    "AgentToken",
    "ArtifactOut",
    "BroadcastOut",
    "BroadcastRecipient",
    "Claimed",
    "ContextTimeline",
    "DeadLetter",
    "DeadLetterEnvelope",
    "DeadLetters",
    "DirectoryEntry",
    "DirectoryPage",
    "Friend",
    "FriendRequestOut",
    "Friends",
    "GroupInvitation",
    "GroupInvitations",
    "GroupMessageOut",
    "GroupOut",
    "GroupWithMembers",
    "InboxEvent",
    "InboxPage",
    "Json",
    "KeyInfo",
    "KeyList",
    "MemberGroup",
    "MemberGroups",
    "Membership",
    "MessageOut",
    "NewKey",
    "Out",
    "OutboxOverview",
    "OwnedGroup",
    "OwnedGroups",
    "OwnerToken",
    "Parts",
    "PendingRequest",
    "Presence",
    "PublicationOut",
    "PublicationPage",
    "Receipt",
    "Registered",
    "RetriedAll",
    "RetriedOne",
    "RosterEntry",
    "StateChangeOut",
    "TaskDetail",
    "TaskMessage",
    "TaskOut",
    "TaskPage",
    "TaskWithMessage",
    "Timeline",
    "TimelineEntry",
    "TimelineMessage",
    "Timestamp",
]

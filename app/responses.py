"""Response bodies: the one description of every JSON shape the API returns.

Each model lists exactly the fields a client sees; building one from a database
row (``Model.of(row)``) drops the columns that are not part of the API. The
same models document ``/openapi.json`` (``@doc(..., response=Model)``) and
build the ``task``/``message``/``artifact``/``request`` objects inside event
payloads (``model_dump(mode="json")``), so an object has one shape wherever it
travels.

Timestamps are serialized one way everywhere, by the function that writes an
inbox event's ``created_at`` (``app.event_wire.format_timestamp``): ISO 8601 in
UTC with microseconds (``2026-01-02T03:04:05.123456+00:00``), not pydantic's
``Z`` form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, PlainSerializer, WithJsonSchema, field_validator

from app.domain.task_states import TaskState
from app.event_wire import format_timestamp

Timestamp = Annotated[datetime, PlainSerializer(format_timestamp, return_type=str, when_used="json"),
                      WithJsonSchema({"type": "string", "format": "date-time"})]
Json = dict[str, Any]
Parts = list[Json]


class Out(BaseModel):
    # Rows carry more columns than the API shows (hashes, owner ids): ignore them.
    model_config = ConfigDict(extra="ignore")

    @classmethod
    def of(cls, row: Mapping[str, Any], **extra: Any) -> Self:
        return cls.model_validate({**row, **extra})

    def wire(self) -> Json:
        """The JSON-ready dict (event payloads are dicts; h/a's serializer encodes them)."""
        return self.model_dump(mode="json")


# --- tasks -----------------------------------------------------------------------

class TaskOut(Out):
    task_id: str
    context_id: str
    state: TaskState
    initiator: str
    serving_agent: str
    status_message: Json | None
    created_at: Timestamp
    updated_at: Timestamp


class MessageOut(Out):
    message_id: str
    task_id: str
    context_id: str
    role: Literal["user", "agent"]
    sender: str
    recipient: str
    parts: Parts
    metadata: Json | None
    created_at: Timestamp


class TaskWithMessage(TaskOut):
    """A created task with its first message (also the answer to a replayed create)."""
    message: MessageOut


class Receipt(Out):
    status: Literal["queued", "delivered", "acked"]
    delivered_at: Timestamp | None


class TaskMessage(MessageOut):
    seq: int | None
    receipt: Receipt


class ArtifactOut(Out):
    artifact_id: str
    task_id: str
    name: str | None
    description: str | None
    parts: Parts
    metadata: Json | None
    created_by: str
    created_at: Timestamp


class TaskDetail(TaskOut):
    messages: list[TaskMessage]
    artifacts: list[ArtifactOut]


class TaskPage(Out):
    tasks: list[TaskOut]
    next_cursor: str | None


class TimelineMessage(MessageOut):
    seq: int | None
    task_state: TaskState


class Timeline(Out):
    context_id: str
    messages: list[TimelineMessage]
    tasks: list[str]
    truncated: bool
    # The same entries the agent-side timeline pages through (issue 11).
    entries: list[TimelineEntry]
    next_cursor: str | None


# --- owners, agents, keys ----------------------------------------------------------

class Registered(Out):
    username: str
    is_admin: bool
    virtual_agent_id: str
    created_at: Timestamp


class OwnerToken(Out):
    access_token: str
    token_type: Literal["bearer"]
    expires_in: int


class AgentToken(OwnerToken):
    agent_id: str


class AgentOut(Out):
    """An agent as its owner (and the agent itself, ``GET /v1/mesh/me``) sees it."""
    agent_id: str
    name: str
    display_name: str
    description: str
    skills: list[Json]
    kind: Literal["normal", "virtual-user"]
    status: str
    last_heartbeat_at: Timestamp | None
    inbox_seq: int
    acked_seq: int
    created_at: Timestamp
    updated_at: Timestamp
    instructions: str  # the agent's system prompt; owners and the agent itself only
    listed: bool  # in the directory (issue 11); the owner opts in with PATCH

    @field_validator("skills", mode="before")
    @classmethod
    def decoded(cls, value: Any) -> Any:
        # A connection without the pool's jsonb codec hands the column over as text.
        return json.loads(value) if isinstance(value, str) else value


class AgentList(Out):
    agents: list[AgentOut]


class NewKey(Out):
    key_id: str
    api_key: str
    agent_id: str
    created_at: Timestamp


class KeyInfo(Out):
    key_id: str
    created_at: Timestamp
    revoked_at: Timestamp | None
    last_used_at: Timestamp | None


class KeyList(Out):
    keys: list[KeyInfo]


class Presence(Out):
    agent_id: str
    status: str
    last_heartbeat_at: Timestamp | None


class AgentCard(Out):
    """A2A-style; there is no URL to call, the mesh is the transport."""
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    agent_id: str
    name: str
    description: str | None
    kind: str
    status: str
    last_heartbeat_at: Timestamp | None
    version: str
    capabilities: Json
    defaultInputModes: list[str]  # A2A field names
    defaultOutputModes: list[str]
    skills: list[Json]


# --- friends and groups --------------------------------------------------------------

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
    group_id: str
    agent_id: str
    role: str
    joined_at: Timestamp


# --- inbox ---------------------------------------------------------------------------
# An event's bytes are written by app.event_wire alone (one form on every path);
# this model only documents that form in /openapi.json.

class InboxEvent(Out):
    seq: int
    event_id: str
    type: str
    task_id: str | None
    context_id: str | None
    from_agent_id: str | None
    created_at: Timestamp
    payload: Json


class InboxPage(Out):
    events: list[InboxEvent]
    next_after: int


class Acked(Out):
    acked_seq: int
    inbox_seq: int


# --- admin ---------------------------------------------------------------------------

class OutboxOverview(Out):
    counts: dict[str, int]
    oldest_pending_age_seconds: float


class DeadLetterEnvelope(Out):
    seq: int | None
    event_id: str | None
    type: str | None
    task_id: str | None
    context_id: str | None
    from_agent_id: str | None


class DeadLetter(Out):
    id: int
    topic: str
    recipient: str
    attempts: int
    last_error: str | None
    created_at: Timestamp
    event: DeadLetterEnvelope
    payload_bytes: int


class DeadLetters(Out):
    dead_letters: list[DeadLetter]
    next_after_id: int | None


class RetriedOne(Out):
    retried: int
    ids: list[int]


class RetriedAll(Out):
    retried: int


# --- teams (issue 11) ----------------------------------------------------------------

class GroupMessageOut(Out):
    group_id: str
    message_id: str
    sender: str
    parts: Parts
    metadata: Json | None
    recipients: int
    created_at: Timestamp


class BroadcastRecipient(Out):
    agent_id: str
    task_id: str
    state: TaskState
    last_message: Json | None
    timed_out: bool


class BroadcastOut(Out):
    broadcast_id: str
    context_id: str
    sender: str
    group_id: str | None
    policy: Literal["all", "any", "n"]
    n: int
    deadline: Timestamp
    status: Literal["open", "met", "unmet", "timeout"]
    completed_at: Timestamp | None
    created_at: Timestamp
    task_ids: list[str]
    completed: int
    recipients: list[BroadcastRecipient]


class StateChangeOut(Out):
    from_state: TaskState
    to_state: TaskState
    set_by: str | None
    status_message: Json | None


class TimelineEntry(Out):
    """One thing that happened in a context; exactly the field its ``kind`` names is set."""
    kind: Literal["task", "message", "state", "artifact"]
    at: Timestamp
    task_id: str
    task: TaskOut | None = None
    message: MessageOut | None = None
    state: StateChangeOut | None = None
    artifact: ArtifactOut | None = None


class ContextTimeline(Out):
    context_id: str
    entries: list[TimelineEntry]
    next_cursor: str | None


class DirectoryEntry(Out):
    agent_id: str
    name: str
    display_name: str
    description: str
    skills: list[Json]
    kind: Literal["normal", "virtual-user"]
    status: str
    last_heartbeat_at: Timestamp | None
    rank: float


class DirectoryPage(Out):
    agents: list[DirectoryEntry]
    next_cursor: str | None

"""Request bodies, validated with pydantic. Message parts are A2A's."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from app.domain.ids import ID_PATTERN, NAME_PATTERN, USERNAME_PATTERN
from app.domain.task_states import TaskState
from app.platform.settings import (
    PUBLICATION_SUMMARY_CEILING,
    PUBLICATION_TAG_CEILING,
    PUBLICATION_TAGS_CEILING,
    PUBLICATION_TITLE_CEILING,
)

Id = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
AgentId = Annotated[str, StringConstraints(pattern=ID_PATTERN, max_length=80)]
Metadata = dict[str, Any] | None
INSTRUCTIONS_MAX_BYTES = 8192


def _instructions_size(value: str | None) -> str | None:
    if value is not None and len(value.encode()) > INSTRUCTIONS_MAX_BYTES:
        raise ValueError(f"instructions are {len(value.encode())} bytes; at most "
                         f"{INSTRUCTIONS_MAX_BYTES} (UTF-8) are allowed")
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- parts ------------------------------------------------------------------

class TextPart(Strict):
    kind: Literal["text"]
    text: str
    metadata: Metadata = None


class DataPart(Strict):
    kind: Literal["data"]
    data: dict[str, Any]
    metadata: Metadata = None


class FileContent(Strict):
    name: str | None = None
    mime_type: str | None = None
    bytes: str | None = None
    uri: str | None = None

    @model_validator(mode="after")
    def one_source(self) -> FileContent:
        if (self.bytes is None) == (self.uri is None):
            raise ValueError("a file needs exactly one of 'bytes' (base64) or 'uri'")
        if self.bytes is not None:
            try:
                base64.b64decode(self.bytes, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError("file 'bytes' must be base64") from exc
        return self


class FilePart(Strict):
    kind: Literal["file"]
    file: FileContent
    metadata: Metadata = None


Part = Annotated[TextPart | DataPart | FilePart, Field(discriminator="kind")]
Parts = Annotated[list[Part], Field(min_length=1, max_length=100)]


def dump_parts(parts: list[TextPart | DataPart | FilePart]) -> list[dict[str, Any]]:
    return [p.model_dump(exclude_none=True) for p in parts]


# --- owner side ---------------------------------------------------------------

class Credentials(Strict):
    username: Annotated[str, StringConstraints(pattern=USERNAME_PATTERN)]
    password: Annotated[str, StringConstraints(min_length=8, max_length=256)]


class LoginBody(Strict):
    username: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    password: Annotated[str, StringConstraints(min_length=1, max_length=256)]


class Skill(BaseModel):
    """A2A AgentSkill: id and name required, the rest optional."""
    model_config = ConfigDict(extra="allow")
    id: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    name: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    description: str | None = None
    tags: list[str] | None = None
    examples: list[str] | None = None


class A2ARemoteIn(Strict):
    """An A2A server that serves the new agent: its agent card's URL (checked by the
    webhook target rule) and headers sent with every call to it (e.g. its API key):
    token names, single-line printable ASCII values."""
    card_url: Annotated[str, StringConstraints(min_length=1, max_length=2048)]
    headers: Annotated[dict[Annotated[str, StringConstraints(
        pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")], Annotated[str, StringConstraints(
            max_length=4096, pattern=r"^[\t\x20-\x7e]*$")]], Field(max_length=20)] | None = None


class AgentCreate(Strict):
    name: Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
    display_name: Annotated[str, StringConstraints(max_length=200)] | None = None
    description: Annotated[str, StringConstraints(max_length=4000)] | None = None
    skills: Annotated[list[Skill], Field(max_length=100)] | None = None
    # The agent's system prompt for `mesh agent`; owner-set, read by the agent via /v1/mesh/me.
    instructions: str | None = None
    _check_instructions = field_validator("instructions")(_instructions_size)
    # Served by an A2A server elsewhere (kind "a2a"; the a2a-bridge process forwards).
    a2a: A2ARemoteIn | None = None


class AgentPatch(Strict):
    display_name: Annotated[str, StringConstraints(max_length=200)] | None = None
    description: Annotated[str, StringConstraints(max_length=4000)] | None = None
    skills: Annotated[list[Skill], Field(max_length=100)] | None = None
    instructions: str | None = None
    _check_instructions = field_validator("instructions")(_instructions_size)
    # In the directory (GET /v1/mesh/directory)? Off until the owner opts in.
    listed: bool | None = None
    # `mesh agent` starts no run once the UTC day's reported spend reaches it;
    # null removes the budget (ADR 047).
    daily_budget_usd: Annotated[float, Field(strict=True, ge=0, le=1_000_000,
                                             allow_inf_nan=False)] | None = None


class GroupCreate(Strict):
    group_id: Id
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]


class GroupMemberAdd(Strict):
    agent_id: AgentId
    role: Literal["owner", "admin", "member"] = "member"


class ApiKeyBody(Strict):
    api_key: Annotated[str, StringConstraints(min_length=1, max_length=200)]


# --- agent side ---------------------------------------------------------------

class FriendRequestCreate(Strict):
    to_agent_id: AgentId
    note: Annotated[str, StringConstraints(max_length=1000)] | None = None


class MessageIn(Strict):
    message_id: Id | None = None
    parts: Parts
    metadata: Metadata = None


class TaskCreate(Strict):
    to_agent_id: AgentId
    message: MessageIn
    task_id: Id | None = None
    context_id: Id | None = None


class StatusChange(Strict):
    state: TaskState
    message: MessageIn | None = None


class ArtifactIn(Strict):
    artifact_id: Id | None = None
    name: Annotated[str, StringConstraints(max_length=200)] | None = None
    description: Annotated[str, StringConstraints(max_length=4000)] | None = None
    parts: Parts
    metadata: Metadata = None


def _json_integer(value: Any, info: ValidationInfo) -> Any:
    # JSON booleans and numeric strings are not counts or seqs; say so instead of coercing.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{info.field_name} must be a JSON integer")
    return value


class AckBody(Strict):
    seq: Annotated[int, Field(ge=0, le=2**63 - 1)]
    _seq_integer = field_validator("seq", mode="before")(_json_integer)


# The most events one claim covers (``ahead``).
CLAIM_AHEAD_MAX = 500


class ClaimBody(AckBody):
    # The runtime's own id, kept in its state folder: a retry or a renewal of its
    # claim after a restart is recognised as its own.
    consumer: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
    # Claim this many events from ``seq`` on at once (as far as the inbox goes), so a
    # runtime working through a backlog asks once per run of events, not per event.
    ahead: Annotated[int, Field(ge=1, le=CLAIM_AHEAD_MAX)] = 1
    _ahead_integer = field_validator("ahead", mode="before")(_json_integer)


# --- teams ---------------------------------------------------------

class GroupMessageIn(Strict):
    parts: Parts
    metadata: Metadata = None


class BroadcastCreate(Strict):
    to_agent_ids: Annotated[list[AgentId], Field(min_length=1, max_length=1000)] | None = None
    group_id: Id | None = None
    message: MessageIn
    policy: Literal["all", "any", "n"] = "all"
    n: Annotated[int, Field(ge=1, le=1000)] | None = None
    timeout_seconds: Annotated[int, Field(ge=1, le=7 * 24 * 3600)] = 300

    @model_validator(mode="after")
    def one_audience(self) -> BroadcastCreate:
        if (self.to_agent_ids is None) == (self.group_id is None):
            raise ValueError("give exactly one of to_agent_ids or group_id")
        if self.policy == "n" and self.n is None:
            raise ValueError("policy 'n' needs n (how many recipients must complete)")
        if self.policy != "n" and self.n is not None:
            raise ValueError("n is only for policy 'n'")
        if self.to_agent_ids is not None and len(set(self.to_agent_ids)) != len(self.to_agent_ids):
            raise ValueError("to_agent_ids lists an agent twice")
        return self


class WebhookPut(Strict):
    # Longer URLs and other forms are refused by app.platform.webhook_target with a reason.
    url: Annotated[str, StringConstraints(min_length=1, max_length=4096)]


# --- runs ---------------------------------------------------------------------

# running: reported as it starts; ok: it ended normally; limit: a hard limit
# stopped it (limit_hit says which); failed: it could not finish (error says why).
RunOutcome = Literal["running", "ok", "limit", "failed"]
RUN_TEXT_MAX = 2000


class RunReport(Strict):
    run_id: Id
    event_id: Id | None = None
    task_id: Id | None = None
    context_id: Id | None = None
    outcome: RunOutcome
    turns: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    cost_usd: Annotated[float, Field(ge=0, le=1_000_000, allow_inf_nan=False)] = 0.0
    duration_ms: Annotated[int, Field(ge=0, le=10 ** 12)] | None = None
    model: Annotated[str, StringConstraints(max_length=200)] | None = None
    limit_hit: Annotated[str, StringConstraints(max_length=200)] | None = None
    # A command's exit status (`mesh daemon --exec`); negative: killed by that signal.
    exit_status: Annotated[int, Field(ge=-255, le=255)] | None = None
    # Longer error texts are cut to RUN_TEXT_MAX characters, not refused: a
    # run's report must not be lost to a long stack trace.
    error: str | None = None

    @field_validator("error")
    @classmethod
    def _cut(cls, value: str | None) -> str | None:
        return value[:RUN_TEXT_MAX] if value is not None else None
# --- publications ------------------------------------------------------------

# A tag is one word of letters, digits and ._+- (so "c++", "node.js", "gpt-4" fit);
# it is stored lowercased. The settings may lower every limit here, never raise it.
TAG_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._+-]{{0,{PUBLICATION_TAG_CEILING - 1}}}$"
Tag = Annotated[str, StringConstraints(pattern=TAG_PATTERN)]


class PublicationCreate(Strict):
    source_agent_id: AgentId
    title: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                            max_length=PUBLICATION_TITLE_CEILING)]
    summary: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                              max_length=PUBLICATION_SUMMARY_CEILING)]
    tags: Annotated[list[Tag], Field(max_length=PUBLICATION_TAGS_CEILING)] = []

    @field_validator("tags")
    @classmethod
    def normalized(cls, value: list[str]) -> list[str]:
        # One spelling per tag, so ?tag= finds "Python" and "python" alike.
        return list(dict.fromkeys(t.lower() for t in value))


class PublicationFork(Strict):
    name: Annotated[str, StringConstraints(pattern=NAME_PATTERN)]

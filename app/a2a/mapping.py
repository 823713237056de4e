"""Mesh ↔ A2A: states, parts, messages, tasks and stream events — one place each.

Everything is built as A2A's JSON form and parsed into the SDK's protobuf types
with ``ParseDict``, so the SDK's own schema checks every object we hand it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from a2a.server.events.event_queue import Event
from a2a.types.a2a_pb2 import Message, Part, StreamResponse, Task, TaskState
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from google.protobuf.json_format import MessageToDict, ParseDict

from app.domain.event_wire import format_timestamp
from app.domain.task_states import TERMINAL

# The resume extension (ADR 017): every streamed event names its per-task
# sequence under this metadata key; a client resumes with ``Last-Event-ID``.
RESUME_EXTENSION = "https://agent-mesh.dev/a2a/extensions/resume/v1"
SEQ_KEY = "agent-mesh.seq"

# The card's input and output modes, and every media type a part sent to the mesh
# may have (ADR 034): a text part is carried as plain text and a data part as
# JSON (the mesh keeps no media type for either), a file as opaque bytes.
MEDIA_TYPES = ("text/plain", "application/json", "application/octet-stream")
# A part without a media type has its kind's.
_KIND_MEDIA_TYPE = {"text": "text/plain", "data": "application/json",
                    "raw": "application/octet-stream", "url": "application/octet-stream"}

# The one mapping of task states (mesh names are A2A v0.3's kebab-case names).
_STATE_TO_A2A: dict[str, int] = {
    "submitted": TaskState.TASK_STATE_SUBMITTED,
    "working": TaskState.TASK_STATE_WORKING,
    "input-required": TaskState.TASK_STATE_INPUT_REQUIRED,
    "auth-required": TaskState.TASK_STATE_AUTH_REQUIRED,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "canceled": TaskState.TASK_STATE_CANCELED,
    "rejected": TaskState.TASK_STATE_REJECTED,
}
_STATE_FROM_A2A = {v: k for k, v in _STATE_TO_A2A.items()}


def state_to_a2a(state: str) -> int:
    return _STATE_TO_A2A[state]


def state_from_a2a(state: int) -> str | None:
    """None for TASK_STATE_UNSPECIFIED (no filter)."""
    if state == TaskState.TASK_STATE_UNSPECIFIED:
        return None
    if state not in _STATE_FROM_A2A:
        raise InvalidParamsError(message=f"unknown task state {state}")
    return _STATE_FROM_A2A[state]


def is_terminal(state: str) -> bool:
    return state in TERMINAL


# --- parts -----------------------------------------------------------------------------

def part_to_a2a(part: Mapping[str, Any]) -> dict[str, Any]:
    """A mesh part as A2A v1.0 JSON; file bytes are base64 on both sides."""
    out: dict[str, Any] = {}
    kind = part.get("kind")
    if kind == "text":
        out["text"] = part.get("text", "")
    elif kind == "data":
        out["data"] = part.get("data", {})
    elif kind == "file":
        file = part.get("file") or {}
        if file.get("bytes") is not None:
            out["raw"] = file["bytes"]
        else:
            out["url"] = file.get("uri", "")
        if file.get("name"):
            out["filename"] = file["name"]
        if file.get("mime_type"):
            out["mediaType"] = file["mime_type"]
    if part.get("metadata"):
        out["metadata"] = part["metadata"]
    return out


def check_media_type(part: Part) -> None:
    """ContentTypeNotSupportedError for a part whose media type is not one of the
    card's input modes (compared without parameters, case-insensitively)."""
    content = part.WhichOneof("content")
    declared = part.media_type.split(";", 1)[0].strip().lower()
    media = declared or _KIND_MEDIA_TYPE.get(content or "", "")
    if media and media not in MEDIA_TYPES:
        raise ContentTypeNotSupportedError(
            message=f"media type '{part.media_type[:100]}' is not one of this agent's input "
                    f"modes ({', '.join(MEDIA_TYPES)}); send text as text/plain, JSON as "
                    "application/json and any other file as application/octet-stream")


def part_from_a2a(part: Part) -> dict[str, Any]:
    """An A2A part as the mesh's part JSON (validated again by the mesh's schema)."""
    check_media_type(part)
    content = part.WhichOneof("content")
    out: dict[str, Any]
    if content == "text":
        out = {"kind": "text", "text": part.text}
    elif content == "data":
        data = MessageToDict(part.data)
        if not isinstance(data, dict):
            raise InvalidParamsError(message="a data part must hold a JSON object; wrap other "
                                             "values, e.g. {\"value\": [...]}")
        out = {"kind": "data", "data": data}
    elif content in ("raw", "url"):
        file: dict[str, Any] = {}
        if content == "raw":
            file["bytes"] = MessageToDict(Part(raw=part.raw))["raw"]
        else:
            file["uri"] = part.url
        if part.filename:
            file["name"] = part.filename
        if part.media_type:
            file["mime_type"] = part.media_type
        out = {"kind": "file", "file": file}
    else:
        raise InvalidParamsError(message="a part needs one of text, data, raw or url")
    if part.HasField("metadata"):
        out["metadata"] = MessageToDict(part.metadata)
    return out


# --- messages, tasks, events -----------------------------------------------------------

def message_json(msg: Mapping[str, Any]) -> dict[str, Any]:
    """A mesh message (MessageOut JSON) as an A2A Message JSON."""
    out: dict[str, Any] = {
        "messageId": msg["message_id"], "contextId": msg["context_id"],
        "taskId": msg["task_id"],
        "role": "ROLE_USER" if msg["role"] == "user" else "ROLE_AGENT",
        "parts": [part_to_a2a(p) for p in msg["parts"]],
        "metadata": {**(msg.get("metadata") or {}), "agent-mesh.sender": msg["sender"]},
    }
    return out


def _status_json(task: Mapping[str, Any], message: Mapping[str, Any] | None) -> dict[str, Any]:
    status: dict[str, Any] = {"state": TaskState.Name(state_to_a2a(task["state"])),
                              "timestamp": _stamp(task["updated_at"])}
    if message is not None and message.get("message_id"):
        status["message"] = message_json(message)
    return status


def _stamp(value: Any) -> str:
    return value if isinstance(value, str) else format_timestamp(value)


def artifact_json(art: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"artifactId": art["artifact_id"],
                           "parts": [part_to_a2a(p) for p in art["parts"]]}
    for key in ("name", "description", "metadata"):
        if art.get(key):
            out[key] = art[key]
    return out


def task(detail: Mapping[str, Any], *, history_length: int | None = None,
         seq: int | None = None) -> Task:
    """A mesh task (TaskDetail or TaskOut JSON) as an A2A Task; ``seq`` marks a
    snapshot with the per-task sequence it is current to."""
    messages = list(detail.get("messages") or [])
    if history_length is not None:
        messages = messages[-history_length:] if history_length > 0 else []
    status_message = detail.get("status_message")
    metadata: dict[str, Any] = {"agent-mesh.initiator": detail["initiator"],
                                "agent-mesh.serving_agent": detail["serving_agent"]}
    if seq is not None:
        metadata[SEQ_KEY] = seq
    body = {
        "id": detail["task_id"], "contextId": detail["context_id"],
        "status": _status_json(detail, status_message if isinstance(status_message, dict)
                               else None),
        "history": [message_json(m) for m in messages],
        "artifacts": [artifact_json(a) for a in detail.get("artifacts") or []],
        "metadata": metadata,
    }
    return ParseDict(body, Task(), ignore_unknown_fields=True)


def _event(body: dict[str, Any]) -> Event:
    """The one event a StreamResponse JSON holds, as the SDK's event type."""
    response = ParseDict(body, StreamResponse())
    return response.ListFields()[0][1]  # type: ignore[no-any-return]


def stream_event(event: Mapping[str, Any], state: str) -> tuple[Event | None, str]:
    """An inbox event (an ``inbox_events`` row) as an A2A stream event carrying its
    seq, given the task ``state`` before it; returns the state after it.

    A message from the other side is a status update holding the message, not a
    bare Message: in an A2A stream a Message is the final answer and ends it.
    """
    kind, payload, seq = event["type"], event["payload"], event["seq"]
    meta = {SEQ_KEY: seq, "agent-mesh.event_id": event["event_id"]}
    base = {"taskId": event["task_id"], "contextId": event["context_id"], "metadata": meta}
    status: dict[str, Any] = {"timestamp": _stamp(event["created_at"])}
    if kind in ("task.message", "task.created"):
        status.update(state=TaskState.Name(state_to_a2a(state)),
                      message=message_json(payload["message"]))
        return _event({"statusUpdate": {**base, "status": status}}), state
    if kind in ("task.status", "task.timeout"):
        state = payload["state"]
        message = payload.get("message")
        status["state"] = TaskState.Name(state_to_a2a(state))
        if isinstance(message, dict) and message.get("message_id"):
            status["message"] = message_json(message)
        return _event({"statusUpdate": {**base, "status": status}}), state
    if kind == "task.artifact":
        update = {**base, "artifact": artifact_json(payload["artifact"]), "lastChunk": True}
        return _event({"artifactUpdate": update}), state
    return None, state


def message_from_a2a(msg: Message) -> dict[str, Any]:
    """The mesh MessageIn JSON of an A2A message (validated by the mesh's schema)."""
    body: dict[str, Any] = {"parts": [part_from_a2a(p) for p in msg.parts]}
    if msg.message_id:
        body["message_id"] = msg.message_id
    if msg.HasField("metadata"):
        body["metadata"] = MessageToDict(msg.metadata)
    return body

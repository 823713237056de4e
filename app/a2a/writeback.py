"""A remote A2A agent's answers, written into the mesh as that agent (ADR 041).

The bridge hands every stream event, ``SendMessage`` answer and ``GetTask``
snapshot of a forwarded task to :class:`WriteBack`, which writes it through
app.services.tasks — the same permissions, transactions, outbox and ordering as
the REST API — as the bridged agent. Every write is idempotent, so an event
seen twice (a snapshot after a stream, a retry after a crash) is written once:

* a message by its mesh id, derived from the remote ``messageId`` (a repeat is
  found stored and skipped);
* an artifact by its id (an appended chunk by its id and content);
* a state by the task's current state (the same state again writes nothing).

The mesh's state machine needs ``working`` between ``submitted`` and an answer;
a remote that answers at once is walked through it.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from a2a.types.a2a_pb2 import Artifact, Message, Part, Role, StreamResponse, Task, TaskState
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from app.a2a import mapping
from app.domain import ids, task_states
from app.domain.schemas import ArtifactIn, MessageIn, StatusChange
from app.platform.errors import Problem
from app.services import tasks
from app.services.mesh import Mesh
from app.services.principals import Agent
from app.store import a2a_remotes as remotes_store
from app.store import tasks as tasks_store

log = logging.getLogger("mesh.a2a_bridge")

# Where a task waits for the other side (or is done): a stream ends there.
SETTLED = task_states.TERMINAL | {"input-required", "auth-required"}
REMOTE_ID_KEY = "a2a.message_id"


def mesh_id(remote_id: str, salt: str = "") -> str:
    """The mesh id of a remote message or artifact: its own when it is a valid
    mesh id, else one derived from it (the same every time)."""
    if remote_id and ids.is_valid_id(remote_id) and not salt:
        return remote_id
    digest = hashlib.sha256(f"{remote_id}\x00{salt}".encode()).hexdigest()[:32]
    return f"a2a-{digest}"


def parts_from_a2a(parts: Any) -> list[dict[str, Any]]:
    """Remote parts as mesh parts. A media type the mesh's own A2A endpoint would
    refuse is kept on a file part and dropped from text and data parts (what the
    remote said is written either way)."""
    out = []
    for part in parts:
        try:
            out.append(mapping.part_from_a2a(part))
        except A2AError:
            plain = Part()
            plain.CopyFrom(part)
            media = plain.media_type
            plain.media_type = ""
            converted = mapping.part_from_a2a(plain)
            if converted.get("kind") == "file" and media:
                converted["file"]["mime_type"] = media
            out.append(converted)
    return out


def text_message(text: str, message_id: str) -> MessageIn:
    return MessageIn(message_id=message_id, parts=[{"kind": "text", "text": text}])


class WriteBack:
    """One forwarded task's answers, written as the bridged agent ``me``."""

    def __init__(self, mesh: Mesh, me: Agent, task_id: str) -> None:
        self.mesh = mesh
        self.pool = mesh.pool
        self.me = me
        self.task_id = task_id

    async def apply(self, event: StreamResponse) -> bool:
        """Write one stream event (or SendMessage answer); True once the task settled."""
        which = event.WhichOneof("payload")
        if which == "task":
            return await self.snapshot(event.task)
        if which == "message":  # a direct answer: the remote's reply ends the task
            await self.message(event.message)
            return await self.state("completed")
        if which == "status_update":
            status = event.status_update.status
            msg = status.message if status.HasField("message") else None
            return await self.state(_state(status.state), msg)
        if which == "artifact_update":
            await self.artifact(event.artifact_update.artifact,
                                append=event.artifact_update.append)
        return False

    async def snapshot(self, task: Task) -> bool:
        """A whole task (GetTask, a stream's first or last event): its history,
        artifacts and status, each written unless it already is."""
        for msg in task.history:
            await self.message(msg)
        for art in task.artifacts:
            await self.artifact(art)
        msg = task.status.message if task.status.HasField("message") else None
        return await self.state(_state(task.status.state), msg)

    # --- one thing each --------------------------------------------------------------

    async def _stored(self, message_id: str) -> bool:
        return await tasks_store.get_message(self.pool, self.me.agent_id, message_id) is not None

    def _message_in(self, msg: Message) -> MessageIn:
        remote_id = msg.message_id or hashlib.sha256(msg.SerializeToString()).hexdigest()
        metadata = MessageToDict(msg.metadata) if msg.HasField("metadata") else {}
        metadata[REMOTE_ID_KEY] = msg.message_id
        return MessageIn(message_id=mesh_id(remote_id), parts=parts_from_a2a(msg.parts),
                         metadata=metadata)

    async def message(self, msg: Message) -> None:
        if msg.role != Role.ROLE_AGENT or not msg.parts:
            return  # the mesh side's own messages, echoed in the remote's history
        body = self._message_in(msg)
        assert body.message_id is not None
        if await self._stored(body.message_id):
            return
        try:
            await tasks.append_message(self.mesh, self.me, self.task_id, body)
        except Problem as exc:
            if exc.status != 409:  # a task closed meanwhile (the initiator canceled)
                raise
            log.info("a2a %s: message for closed task %s dropped (%s)", self.me.agent_id,
                     self.task_id, exc.detail)

    async def artifact(self, art: Artifact, *, append: bool = False) -> None:
        parts = parts_from_a2a(art.parts)
        salt = hashlib.sha256(repr(parts).encode()).hexdigest()[:16] if append else ""
        body = ArtifactIn(artifact_id=mesh_id(art.artifact_id or "artifact", salt),
                          name=art.name[:200] or None, description=art.description[:4000] or None,
                          parts=parts,
                          metadata=MessageToDict(art.metadata) if art.HasField("metadata")
                          else None)
        try:
            await tasks.add_artifact(self.mesh, self.me, self.task_id, body)
        except Problem as exc:
            if exc.status != 409:
                raise
            log.info("a2a %s: artifact for task %s not written (%s)", self.me.agent_id,
                     self.task_id, exc.detail)

    async def state(self, target: str | None, msg: Message | None = None) -> bool:
        """Move the mesh task to the remote's state (through ``working`` when the
        mesh needs it), the status message with the last step; True if settled."""
        body = None
        if msg is not None and msg.role == Role.ROLE_AGENT and msg.parts:
            body = self._message_in(msg)
            assert body.message_id is not None
            if await self._stored(body.message_id):
                body = None
        task = await tasks_store.get(self.pool, self.task_id)
        if task is None:
            return True  # deleted with its agent: nothing left to follow
        current = task["state"]
        if target is None or target == current or target == "submitted" \
                or task_states.is_terminal(current):
            if body is not None and not task_states.is_terminal(current):
                await self.message(msg)  # type: ignore[arg-type]
            return task_states.is_terminal(current) or (target in SETTLED
                                                          and target == current)
        path = _path(current, target)
        if not path:
            log.warning("a2a %s: task %s cannot move from %s to the remote's %s", self.me.agent_id,
                        self.task_id, current, target)
            if body is not None:
                await self.message(msg)  # type: ignore[arg-type]
            return target in SETTLED
        for i, step in enumerate(path):
            last = i == len(path) - 1
            try:
                await tasks.change_status(self.mesh, self.me, self.task_id,
                                          StatusChange(state=step,  # type: ignore[arg-type]
                                                       message=body if last else None))
            except Problem as exc:
                if exc.status != 409:
                    raise
                log.info("a2a %s: task %s moved meanwhile (%s)", self.me.agent_id, self.task_id,
                         exc.detail)
                return True
        await remotes_store.set_state(self.pool, self.task_id, target)
        return target in SETTLED

    async def fail(self, reason: str) -> None:
        """The remote refused or lost the task: it fails on the mesh with the reason."""
        message_id = mesh_id("failure", f"{self.task_id}\x00{reason}")
        task = await tasks_store.get(self.pool, self.task_id)
        if task is None or task_states.is_terminal(task["state"]):
            return
        for step in _path(task["state"], "failed") or ["failed"]:
            change = StatusChange(state=step,  # type: ignore[arg-type]
                                  message=text_message(reason, message_id)
                                  if step == "failed" else None)
            try:
                await tasks.change_status(self.mesh, self.me, self.task_id, change)
            except Problem as exc:
                if exc.status != 409:
                    raise
                return
        await remotes_store.set_state(self.pool, self.task_id, "failed")


def _state(value: int) -> str | None:
    if value == TaskState.TASK_STATE_UNSPECIFIED:
        return None
    try:
        return mapping.state_from_a2a(value)
    except A2AError:
        return None


def _path(current: str, target: str) -> list[str]:
    if task_states.allowed(current, target):
        return [target]
    if task_states.allowed(current, "working") and task_states.allowed("working", target):
        return ["working", target]
    return []

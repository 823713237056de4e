"""Creating a task: the reach check, then ONE statement that writes the task, its
first message, the recipient's inbox event (with its next seq) and the outbox
row together (ADR 028). The creates of one web process share that statement
through app.services.task_creates; what follows on a task is app.services.tasks."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg

from app.domain import ids, task_states
from app.domain.permissions import can_communicate
from app.domain.schemas import TaskCreate, dump_parts
from app.platform import tracing
from app.platform.errors import bad_request, conflict, forbidden, not_found
from app.responses import MessageOut, TaskOut, TaskWithMessage
from app.services import task_creates
from app.services.hashing import content_hash
from app.services.mesh import Mesh
from app.services.principals import Agent
from app.services.replay import Replay, message_id_reused, replayed, same_request
from app.store import social as social_store
from app.store import tasks as tasks_store
from app.store.writes import NewEvent, NewTask


async def check_can_message(mesh: Mesh, sender: str, recipient: str) -> None:
    """Refuse unless ``sender`` may message ``recipient``: the process's
    relationship cache answers when it has one, else Postgres."""
    if sender == recipient:
        raise bad_request("an agent cannot send a task to itself")
    rel = await (mesh.reach.relationship(sender, recipient) if mesh.reach is not None
                 else social_store.relationship(mesh.pool, sender, recipient))
    if not rel.both_exist:  # the sender is authenticated, so the recipient is missing
        raise not_found(f"unknown agent '{recipient}'")
    if not can_communicate(rel):
        raise forbidden(f"'{sender}' and '{recipient}' are neither friends nor share a group; "
                        "send a friend request first (POST /v1/mesh/friends/requests)")


async def create_task(mesh: Mesh, me: Agent, body: TaskCreate) -> tuple[TaskWithMessage, bool]:
    """Returns (task with its first message, created?). created=False is an
    idempotent retry of the same message_id with the same content. The reach check
    uses the process's relationship cache, the write its create batcher, when it
    has them.

    One statement writes it all (ADR 028), so the rows and the event payload are
    built here first, with the gateway's clock for created_at; a unique id that
    is taken aborts the statement, and is then told apart (retry or conflict)."""
    msg = body.message
    message_id = msg.message_id or ids.new_message_id(me.agent_id)
    parts = dump_parts(msg.parts)
    fingerprint = content_hash(op="create", sender=me.agent_id, to=body.to_agent_id,
                               task_id=body.task_id, context_id=body.context_id,
                               parts=parts, metadata=msg.metadata)
    task_id = body.task_id or ids.new_task_id(me.agent_id)
    context_id = body.context_id or ids.new_context_id(me.agent_id)
    await check_can_message(mesh, me.agent_id, body.to_agent_id)
    now = datetime.now(UTC)
    task_out = TaskOut(task_id=task_id, context_id=context_id, state=task_states.INITIAL,
                       initiator=me.agent_id, serving_agent=body.to_agent_id,
                       status_message=None, created_at=now, updated_at=now)
    message_out = MessageOut(message_id=message_id, task_id=task_id, context_id=context_id,
                             role="user", sender=me.agent_id, recipient=body.to_agent_id,
                             parts=parts, metadata=msg.metadata, created_at=now)
    event = NewEvent(agent_id=body.to_agent_id, type="task.created", task_id=task_id,
                     context_id=context_id, from_agent_id=me.agent_id,
                     payload={"task": task_out.wire(), "message": message_out.wire()})
    new = NewTask(event, message_id=message_id, parts=parts, metadata=msg.metadata,
                  content_hash=fingerprint, created_at=now)
    try:
        if mesh.creates is not None:
            # The shared statement runs in the batcher's task: the time this
            # request waits for it is its transaction.
            with tracing.span("mesh.transaction", attributes={"mesh.batched": True}):
                seq = await mesh.creates.create(new)
        else:
            (seq,) = await task_creates.write(mesh.pool, mesh.settings.bus_topic,
                                              mesh.wakeup, [new])
    except asyncpg.UniqueViolationError as exc:
        taken = (task_id_unavailable(task_id)
                 if exc.constraint_name == tasks_store.TASK_ID_TAKEN else None)
        return replayed(await _replay_create(mesh.pool, message_id, fingerprint, me.agent_id,
                                             taken))
    if seq is None:
        raise await _not_written(mesh.pool, me, body.to_agent_id, context_id)
    return TaskWithMessage(**dict(task_out), message=message_out), True


async def _not_written(pool: asyncpg.Pool, me: Agent, to: str, context_id: str) -> Exception:
    """Why the create's statement wrote nothing: the context named is someone
    else's conversation (ADR 030), or the recipient was deleted after the reach
    check. Read only on this path, so an accepted create costs no extra round trip."""
    if not await tasks_store.may_name_context(pool, context_id, me.agent_id):
        return context_not_yours(context_id)
    return not_found(f"agent '{to}' no longer exists; nothing can be sent to it")


def context_not_yours(context_id: str) -> Exception:
    """One answer for a context of others, whoever they are (ADR 030)."""
    return forbidden(f"context '{context_id}' is a conversation you do not take part in; "
                     "omit context_id to start a new one, or ask one of its participants "
                     "to bring you in")


def task_id_unavailable(task_id: str) -> str:
    """One answer whoever holds the id (ADR 019): it names no owner, and it is the
    same for a task of yours and one of another tenant's."""
    return (f"task_id '{task_id}' is not available; omit task_id to get a server-chosen "
            "one, or choose another")


async def _replay_create(conn: asyncpg.Connection | asyncpg.Pool, message_id: str, fingerprint: str,
                         sender: str, taken: str | None = None) -> Exception:
    """A unique id collided: the same request again (→ Replay) or another one (→ 409)."""
    existing = await tasks_store.get_message(conn, sender, message_id)
    if same_request(existing, fingerprint, by=sender):
        assert existing is not None
        task = await tasks_store.get(conn, existing["task_id"])
        assert task is not None
        return Replay(TaskWithMessage.of(task, message=MessageOut.of(existing)))
    if existing is not None:
        return message_id_reused(message_id)
    return conflict(taken or f"message_id '{message_id}' conflicts")

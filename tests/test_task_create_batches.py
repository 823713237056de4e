"""Concurrent creates on one web process share one statement (ADR 028), and each
still gets its own answer: consecutive seqs per recipient, a conflict only for
the create that conflicts, a retry answered as a retry. The batch is made
deterministic by holding the recipient's counter row in another transaction, so
the first create holds the only slot while the others queue."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from app.domain.schemas import TaskCreate
from app.platform.errors import Problem
from app.platform.settings import Settings
from app.responses import TaskWithMessage
from app.services import accounts, task_creation
from app.services.mesh import Mesh
from app.services.task_creates import CreateBatcher
from tests.support.meshapi import MeshFactory


def _statements() -> float:
    return REGISTRY.get_sample_value("agent_mesh_task_create_statements_total") or 0.0


def _create(to: str, text: str, message_id: str | None = None) -> TaskCreate:
    message: dict[str, Any] = {"parts": [{"kind": "text", "text": text}]}
    if message_id is not None:
        message["message_id"] = message_id
    return TaskCreate.model_validate({"to_agent_id": to, "message": message})


async def _until(condition: Any) -> None:
    """Await a state of the batcher (the creates before it read Postgres first)."""
    deadline = asyncio.get_running_loop().time() + 60
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the batcher never got there")
        await asyncio.sleep(0.005)


async def test_creates_queued_behind_a_busy_slot_go_in_one_statement(
        mesh: MeshFactory, migrated: Settings, db: asyncpg.Pool,
        redis_client: aioredis.Redis) -> None:
    a, b = await mesh.pair()
    me = await accounts.resolve(db, migrated, a.token)
    first, _ = await task_creation.create_task(Mesh(db, migrated, redis_client), me,
                                               _create(b.agent_id, "stored", "m-batch-1"))
    creates = CreateBatcher(db, migrated.bus_topic, None, max_batch=64, in_flight=1)
    batched = Mesh(db, migrated, redis_client, creates=creates)

    def send(body: TaskCreate) -> Awaitable[tuple[TaskWithMessage, bool]]:
        return asyncio.ensure_future(task_creation.create_task(batched, me, body))

    seq_before = await db.fetchval("SELECT inbox_seq FROM agents WHERE agent_id = $1",
                                   b.agent_id)
    statements_before = _statements()
    async with db.acquire() as holder, holder.transaction():
        await holder.execute("SELECT 1 FROM agents WHERE agent_id = $1 FOR UPDATE", b.agent_id)
        head = send(_create(b.agent_id, "head"))  # takes the one slot, waits on the lock
        await _until(lambda: list(creates.sizes) == [1])
        goods = [send(_create(b.agent_id, f"good {i}")) for i in range(3)]
        reused = send(_create(b.agent_id, "other content", "m-batch-1"))
        retried = send(_create(b.agent_id, "stored", "m-batch-1"))
        await _until(lambda: creates.queued == 5)
    # The lock is gone: the head commits, the five queued go as one batch.
    results = await asyncio.gather(head, *goods, reused, retried, return_exceptions=True)
    assert list(creates.sizes) == [1, 5]
    # The head, the batch (which the reused id aborts), then its five one by one.
    assert _statements() - statements_before == 1 + 1 + 5

    head_task, head_created = results[0]
    assert head_created
    created = [results[1 + i] for i in range(3)]
    assert all(ok for _, ok in created)
    conflict = results[4]
    assert isinstance(conflict, Problem) and conflict.status == 409
    again, again_created = results[5]
    assert not again_created and again.task_id == first.task_id

    # Each created task's event has a seq of its own, the head's first, then the
    # batch's without a gap, and nothing else took one.
    tasks = [t for t, _ in [results[0], *created]]
    seqs = [await db.fetchval("SELECT inbox_seq FROM task_messages WHERE message_id = $1",
                              t.message.message_id) for t in tasks]
    assert seqs[0] == seq_before + 1
    assert sorted(seqs) == list(range(seq_before + 1, seq_before + 5))
    assert await db.fetchval("SELECT inbox_seq FROM agents WHERE agent_id = $1",
                             b.agent_id) == seq_before + 4
    events = await db.fetch("SELECT seq, task_id FROM inbox_events WHERE agent_id = $1 "
                            "AND seq > $2 ORDER BY seq", b.agent_id, seq_before)
    assert [(e["seq"], e["task_id"]) for e in events] == sorted(
        (seq, t.task_id) for seq, t in zip(seqs, tasks, strict=True))
    assert await db.fetchval("SELECT count(*) FROM outbox_events WHERE key = $1 AND "
                             "(payload->>'seq')::bigint > $2", b.agent_id, seq_before) == 4


async def test_a_batch_reaching_a_deleted_agent_writes_the_others(
        mesh: MeshFactory, migrated: Settings, db: asyncpg.Pool,
        redis_client: aioredis.Redis) -> None:
    a, b = await mesh.pair()
    _, c = await mesh.pair()
    await mesh.befriend(a, c)
    me = await accounts.resolve(db, migrated, a.token)
    creates = CreateBatcher(db, migrated.bus_topic, None, max_batch=64, in_flight=1)
    batched = Mesh(db, migrated, redis_client, creates=creates)
    statements_before = _statements()
    async with db.acquire() as holder, holder.transaction():
        await holder.execute("SELECT 1 FROM agents WHERE agent_id = $1 FOR UPDATE", b.agent_id)
        head = asyncio.ensure_future(task_creation.create_task(
            batched, me, _create(b.agent_id, "head")))
        await _until(lambda: list(creates.sizes) == [1])
        to_b = asyncio.ensure_future(task_creation.create_task(
            batched, me, _create(b.agent_id, "to b")))
        to_c = asyncio.ensure_future(task_creation.create_task(
            batched, me, _create(c.agent_id, "to c")))
        await _until(lambda: creates.queued == 2)
        # c goes away after the reach check passed (its create is queued).
        await db.execute("DELETE FROM agents WHERE agent_id = $1", c.agent_id)
    results = await asyncio.gather(head, to_b, to_c, return_exceptions=True)
    assert list(creates.sizes) == [1, 2]
    assert _statements() - statements_before == 2  # nothing failed: no create was retried
    assert results[0][1] and results[1][1]
    assert isinstance(results[2], Problem) and results[2].status == 404
    assert await db.fetchval("SELECT count(*) FROM tasks WHERE serving_agent = $1",
                             c.agent_id) == 0


def test_a_batcher_needs_room() -> None:
    with pytest.raises(ValueError):
        CreateBatcher(None, "t", None, max_batch=0, in_flight=1)  # type: ignore[arg-type]

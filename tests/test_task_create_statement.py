"""A task's create and a message on a task are one statement each (ADR 028): the
task, its first message, the serving agent's inbox event and its outbox row are
written together or not at all — a taken id or a recipient deleted after the reach check leaves no row, no
seq gap and no outbox row behind. Driven at the service, against the real
Postgres of the test stack."""

from __future__ import annotations

import dataclasses
import functools

import asyncpg
import pytest
import redis.asyncio as aioredis

from app.domain.schemas import TaskCreate
from app.platform.db import create_pool
from app.platform.errors import Problem
from app.platform.settings import Settings
from app.services import accounts, task_creation
from app.services import tasks as tasks_service
from app.services.mesh import Mesh
from app.services.reach_cache import ReachCache
from app.store import social as social_store
from tests.support.meshapi import MeshFactory


@pytest.fixture
def plain(migrated: Settings, db: asyncpg.Pool, redis_client: aioredis.Redis) -> Mesh:
    """The services' context without caches or batcher: each create written alone."""
    return Mesh(db, migrated, redis_client)


def _create(to: str, text: str, **ids: str) -> TaskCreate:
    message: dict[str, object] = {"parts": [{"kind": "text", "text": text}]}
    if "message_id" in ids:
        message["message_id"] = ids.pop("message_id")
    return TaskCreate.model_validate({"to_agent_id": to, "message": message, **ids})


async def _written(db: asyncpg.Pool, recipient: str) -> tuple[int, int, int, int]:
    """The recipient's counter, its inbox events, their outbox rows, tasks it serves."""
    row = await db.fetchrow(
        "SELECT (SELECT inbox_seq FROM agents WHERE agent_id = $1) AS seq, "
        "(SELECT count(*) FROM inbox_events WHERE agent_id = $1) AS events, "
        "(SELECT count(*) FROM outbox_events WHERE key = $1) AS outbox, "
        "(SELECT count(*) FROM tasks WHERE serving_agent = $1) AS tasks", recipient)
    return row["seq"] or 0, row["events"], row["outbox"], row["tasks"]


async def test_create_writes_task_message_event_and_outbox_row_together(
        mesh: MeshFactory, migrated: Settings, db: asyncpg.Pool,
        plain: Mesh) -> None:
    a, b = await mesh.pair()
    me = await accounts.resolve(db, migrated, a.token)
    before = await _written(db, b.agent_id)
    task, created = await task_creation.create_task(plain, me, _create(b.agent_id, "hi"))
    assert created
    seq, events, outbox, tasks = await _written(db, b.agent_id)
    assert (seq, events, outbox, tasks) == (before[0] + 1, before[1] + 1, before[2] + 1,
                                            before[3] + 1)
    event = await db.fetchrow("SELECT * FROM inbox_events WHERE agent_id = $1 AND seq = $2",
                              b.agent_id, seq)
    assert event["type"] == "task.created" and event["task_id"] == task.task_id
    stored = await db.fetchrow("SELECT * FROM task_messages WHERE message_id = $1",
                               task.message.message_id)
    assert stored["inbox_seq"] == seq  # the receipt's seq, without a second write
    stored_task = await db.fetchrow("SELECT * FROM tasks WHERE task_id = $1", task.task_id)
    # What the answer and the event say is what was stored.
    assert stored_task["created_at"] == task.created_at == stored["created_at"]
    assert event["payload"]["task"]["created_at"] == task.model_dump(mode="json")["created_at"]
    assert event["payload"]["message"]["parts"] == stored["parts"]


async def test_a_taken_id_writes_nothing(mesh: MeshFactory, migrated: Settings,
                                         db: asyncpg.Pool, plain: Mesh) -> None:
    a, b = await mesh.pair()
    me = await accounts.resolve(db, migrated, a.token)
    first, _ = await task_creation.create_task(
        plain, me, _create(b.agent_id, "one", message_id="m-fixed-1"))
    before = await _written(db, b.agent_id)

    # The same message again: the stored task, created=False, nothing new.
    again, created = await task_creation.create_task(
        plain, me, _create(b.agent_id, "one", message_id="m-fixed-1"))
    assert not created and again.task_id == first.task_id
    # The same message_id with other content: 409.
    with pytest.raises(Problem) as reused:
        await task_creation.create_task(
            plain, me, _create(b.agent_id, "other", message_id="m-fixed-1"))
    assert reused.value.status == 409
    # A task_id that is taken: 409, whoever holds it.
    with pytest.raises(Problem) as taken:
        await task_creation.create_task(plain, me,
                                        _create(b.agent_id, "two", task_id=first.task_id))
    assert taken.value.status == 409 and "not available" in taken.value.detail
    # No seq was spent on any of them: the next event follows without a gap.
    assert await _written(db, b.agent_id) == before
    await task_creation.create_task(plain, me, _create(b.agent_id, "three"))
    assert (await _written(db, b.agent_id))[0] == before[0] + 1


async def test_a_recipient_deleted_after_the_reach_check_gets_nothing(
        mesh: MeshFactory, migrated: Settings, db: asyncpg.Pool,
        plain: Mesh) -> None:
    a, b = await mesh.pair()
    me = await accounts.resolve(db, migrated, a.token)
    reach = ReachCache(100, 600, functools.partial(social_store.pair_relationships, db))
    cached = dataclasses.replace(plain, reach=reach)
    await task_creation.create_task(cached, me, _create(b.agent_id, "one"))
    # Deleted behind the cache's back: the cached "friends" still lets the send
    # through to the statement, which must find no counter row and write nothing.
    await db.execute("DELETE FROM agents WHERE agent_id = $1", b.agent_id)
    tasks_before = await db.fetchval("SELECT count(*) FROM tasks WHERE initiator = $1",
                                     a.agent_id)
    outbox_before = await db.fetchval("SELECT count(*) FROM outbox_events WHERE key = $1",
                                      b.agent_id)
    with pytest.raises(Problem) as gone:
        await task_creation.create_task(cached, me, _create(b.agent_id, "two"))
    assert gone.value.status == 404 and "no longer exists" in gone.value.detail
    assert await db.fetchval("SELECT count(*) FROM tasks WHERE initiator = $1",
                             a.agent_id) == tasks_before
    assert await db.fetchval("SELECT count(*) FROM task_messages WHERE sender = $1 "
                             "AND parts->0->>'text' = 'two'", a.agent_id) == 0
    assert await db.fetchval("SELECT count(*) FROM outbox_events WHERE key = $1",
                             b.agent_id) == outbox_before


async def _until_waiting_on_a_lock(db: asyncpg.Pool, holder_pid: int) -> None:
    """Until some backend waits on a lock that ``holder_pid`` holds."""
    import asyncio

    deadline = asyncio.get_running_loop().time() + 60
    while not await db.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
            holder_pid):
        assert asyncio.get_running_loop().time() < deadline, "nothing waited on the lock"
        await asyncio.sleep(0.01)


async def test_a_message_racing_a_close_is_refused_and_writes_nothing(
        mesh: MeshFactory, migrated: Settings, db: asyncpg.Pool,
        plain: Mesh) -> None:
    """The message is read against an open task, then the task closes before its
    one statement runs: the statement's lock and re-check refuse it (409), with no
    row, no seq and no outbox row written."""
    import asyncio

    from app.domain.schemas import MessageIn

    a, b = await mesh.pair()
    me = await accounts.resolve(db, migrated, a.token)
    task, _ = await task_creation.create_task(plain, me, _create(b.agent_id, "open"))
    before = await _written(db, b.agent_id)
    async with db.acquire() as holder:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("SELECT 1 FROM tasks WHERE task_id = $1 FOR UPDATE", task.task_id)
        sending = asyncio.ensure_future(tasks_service.append_message(
            plain, me, task.task_id,
            MessageIn.model_validate({"parts": [{"kind": "text", "text": "late"}]})))
        await _until_waiting_on_a_lock(db, holder.get_server_pid())
        await holder.execute("UPDATE tasks SET state = 'canceled' WHERE task_id = $1",
                             task.task_id)
        await tx.commit()
    with pytest.raises(Problem) as refused:
        await sending
    assert refused.value.status == 409 and "terminal" in refused.value.detail
    assert await _written(db, b.agent_id) == before
    assert await db.fetchval("SELECT count(*) FROM task_messages WHERE task_id = $1",
                             task.task_id) == 1


async def test_a_message_records_its_seq_and_moves_the_task(
        mesh: MeshFactory, migrated: Settings, db: asyncpg.Pool,
        plain: Mesh) -> None:
    from app.domain.schemas import MessageIn

    a, b = await mesh.pair()
    me = await accounts.resolve(db, migrated, a.token)
    them = await accounts.resolve(db, migrated, b.token)
    task, _ = await task_creation.create_task(plain, me, _create(b.agent_id, "hi"))
    touched_before = await db.fetchval("SELECT updated_at FROM tasks WHERE task_id = $1",
                                       task.task_id)
    reply, created = await tasks_service.append_message(
        plain, them, task.task_id,
        MessageIn.model_validate({"parts": [{"kind": "text", "text": "reply"}]}))
    assert created and reply.role == "agent" and reply.recipient == a.agent_id
    stored = await db.fetchrow("SELECT * FROM task_messages WHERE sender = $1 AND message_id = $2",
                               b.agent_id, reply.message_id)
    event = await db.fetchrow("SELECT * FROM inbox_events WHERE agent_id = $1 AND seq = $2",
                              a.agent_id, stored["inbox_seq"])
    assert event["type"] == "task.message" and event["task_id"] == task.task_id
    assert event["payload"]["message"]["parts"] == stored["parts"] == [
        {"kind": "text", "text": "reply"}]
    assert stored["created_at"] == reply.created_at
    assert await db.fetchval("SELECT updated_at FROM tasks WHERE task_id = $1",
                             task.task_id) > touched_before


async def test_the_create_keeps_one_generic_plan(
        mesh: MeshFactory, migrated: Settings, plain: Mesh) -> None:
    """The plan cache keeps one plan for the create (ADR 051) instead of planning
    each call anew, built for the one-row estimate of the create's rows (which
    is what makes it no dearer than a per-call plan). One connection, so the
    prepared statement is one."""
    a, b = await mesh.pair()
    me = await accounts.resolve(plain.pool, migrated, a.token)
    pool = await create_pool(migrated, min_size=1, max_size=1)
    try:
        one = dataclasses.replace(plain, pool=pool)
        for i in range(12):
            _, created = await task_creation.create_task(
                one, me, _create(b.agent_id, f"n{i}", context_id=f"plan-{a.key_id[:8]}"))
            assert created
        async with pool.acquire() as conn:
            # (This query is a prepared statement too, and names the function.)
            row = await conn.fetchrow(
                "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE '%task_create_rows(%' "
                "AND statement NOT LIKE '%pg_prepared_statements%'")
            assert row is not None
            assert row["generic_plans"] >= 6 and row["custom_plans"] <= 5, dict(row)
            plan = "\n".join(r[0] for r in await conn.fetch(
                f"EXPLAIN EXECUTE {row['name']}({', '.join(['NULL'] * 15)})"))
        rows_scan = [line for line in plan.splitlines()
                     if "Function Scan on task_create_rows" in line]
        assert rows_scan and all("rows=1 " in line for line in rows_scan), plan
        assert "Function Scan on unnest" not in plan, plan
    finally:
        await pool.close()

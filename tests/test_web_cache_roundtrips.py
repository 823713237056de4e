"""Postgres round trips per send on the web path, counted on
the one connection of a pool with asyncpg's query logger: every statement the
driver sends (BEGIN and COMMIT included) is one round trip."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

from app.domain.schemas import MessageIn, TaskCreate
from app.platform.db import create_pool
from app.platform.settings import Settings
from app.services import accounts, task_creation
from app.services import tasks as tasks_service
from app.services.mesh import Mesh
from app.services.principal_cache import PrincipalCache
from app.services.reach_cache import ReachCache
from app.store import social as social_store
from tests.support.meshapi import MeshFactory


class Woken:
    """The web process's after-commit signal (app.delivery.after_commit) stands here: its
    NOTIFYs are a few per burst, not one per send, and not on the send's path."""

    def __init__(self) -> None:
        self.times = 0

    def wake(self, recipients: Collection[str] = (),
             written: Sequence[Mapping[str, Any]] = ()) -> None:  # app.store.writes.Wakeup
        self.times += 1


class Statements:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def __call__(self, record: asyncpg.connection.LoggedQuery) -> None:
        self.sent.append(" ".join(record.query.split())[:80])

    def take(self) -> list[str]:
        sent, self.sent = self.sent, []
        return sent


@pytest.fixture
async def counted(migrated: Settings) -> AsyncIterator[tuple[asyncpg.Pool, Statements]]:
    pool = await create_pool(migrated, min_size=1, max_size=1)
    statements = Statements()
    async with pool.acquire() as conn:
        conn.add_query_logger(statements)
    yield pool, statements
    await pool.close()


def _text(text: str) -> dict[str, object]:
    return {"parts": [{"kind": "text", "text": text}]}


async def test_round_trips_per_send(mesh: MeshFactory, migrated: Settings,
                                    counted: tuple[asyncpg.Pool, Statements],
                                    redis_client: aioredis.Redis) -> None:
    pool, statements = counted
    a, b = await mesh.pair()
    principals = PrincipalCache(100, 600)
    reach = ReachCache(100, 600, functools.partial(social_store.pair_relationships, pool))
    woken = Woken()
    # The relationship cache and the wake-up, without the create batcher: the
    # create's own statement is what is counted.
    web = Mesh(pool, migrated, redis_client, wakeup=woken, reach=reach)

    me = await accounts.resolve(pool, migrated, a.token, cache=principals)
    assert len(statements.take()) == 1  # the first request of a token asks Postgres
    assert await accounts.resolve(pool, migrated, a.token, cache=principals) == me
    assert statements.take() == []  # …the next ones do not

    create = TaskCreate.model_validate({"to_agent_id": b.agent_id, "message": _text("one")})
    await task_creation.create_task(web, me, create)
    first = statements.take()
    create = TaskCreate.model_validate({"to_agent_id": b.agent_id, "message": _text("two")})
    task, created = await task_creation.create_task(web, me, create)
    assert created
    warm = statements.take()
    print(f"create: {len(first)} round trips cold, {len(warm)} warm: {warm}")
    assert not any("friendships" in q for q in warm)  # the relationship came from memory
    assert any("friendships" in q for q in first)
    assert len(warm) == 1, warm  # task, message, inbox event and outbox row: one statement

    them = await accounts.resolve(pool, migrated, b.token, cache=principals)
    for text in ("reply", "again"):  # the first one's statements learn their types
        statements.take()
        await tasks_service.append_message(web, them, task.task_id,
                                           MessageIn.model_validate(_text(text)))
    appended = statements.take()
    print(f"message: {len(appended)} round trips: {appended}")
    # The task with a retry's message, then the message, its event and the touch.
    assert len(appended) == 2, appended
    assert woken.times == 4


async def test_a_cold_cache_asks_once_for_the_pairs_that_meet(
        mesh: MeshFactory, counted: tuple[asyncpg.Pool, Statements]) -> None:
    """A new web process meets many pairs at once; they share a query, and each
    pair gets its own answer from it."""
    pool, statements = counted
    a, b = await mesh.pair()
    alice_too = await mesh.owner()
    a2, stranger = await alice_too.agent("a2"), await (await mesh.owner()).agent("c")
    await mesh.befriend(a2, b)
    reach = ReachCache(100, 600, functools.partial(social_store.pair_relationships, pool))
    pairs = [(a.agent_id, b.agent_id), (b.agent_id, a.agent_id), (a.agent_id, stranger.agent_id),
             (a2.agent_id, b.agent_id), (a2.agent_id, "nobody@nowhere"), (stranger.agent_id, a2.agent_id)]
    statements.take()
    rels = await asyncio.gather(*(reach.relationship(s, r) for s, r in pairs))
    asked = [q for q in statements.take() if "friendships" in q]
    # Two queries at once: the first two misses go alone, the four behind them together.
    assert len(asked) == 3, asked
    assert [(r.friends, r.both_exist) for r in rels] == [
        (True, True), (True, True), (False, True), (True, True), (False, False), (False, True)]
    await asyncio.gather(*(reach.relationship(s, r) for s, r in pairs))
    # Kept, but for the pair naming no agent, which is asked again.
    assert len([q for q in statements.take() if "friendships" in q]) == 1

"""A repeated status change is idempotent: the caller's own change that
already took effect, asked for again, is answered 200 with the same body and
writes nothing; every other request that is not a legal move stays a 409."""

from __future__ import annotations

import asyncio

import asyncpg

from tests.api_helpers import (
    inbox_rows,
    message_rows,
    move,
    ok,
    outbox_rows,
    problem,
    text_message,
)
from tests.support.meshapi import AgentHandle


async def _rows(db: asyncpg.Pool, agent: AgentHandle, task_id: str) -> tuple[int, int, int]:
    return (await inbox_rows(db, agent.agent_id, task_id),
            await outbox_rows(db, agent.agent_id, task_id), await message_rows(db, task_id))


async def test_the_same_change_again_is_answered_like_the_first_and_writes_nothing(
        mesh, db: asyncpg.Pool) -> None:
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "sum these")
    task_id = task["task_id"]
    ok(await move(b, task_id, "working"))
    done = {"state": "completed", "message": text_message("42", message_id=f"m-{task_id}-done")}
    first = ok(await b.post(f"/v1/mesh/tasks/{task_id}/status", done))
    rows = await _rows(db, a, task_id)

    for _ in range(2):
        again = await b.post(f"/v1/mesh/tasks/{task_id}/status", done)
        assert again.status_code == 200, again.text
        assert again.json() == first
    assert await _rows(db, a, task_id) == rows  # no event, no outbox row, no message
    events = [e for e in (await a.inbox())["events"] if e["type"] == "task.status"]
    assert [e["payload"]["state"] for e in events] == ["working", "completed"]


async def test_a_repeat_without_a_message_is_a_replay_too(mesh, db: asyncpg.Pool) -> None:
    a, b = await mesh.pair()
    task_id = (await a.send(b.agent_id, "look"))["task_id"]
    first = ok(await move(b, task_id, "working"))
    rows = await _rows(db, a, task_id)
    assert ok(await move(b, task_id, "working")) == first
    assert await _rows(db, a, task_id) == rows
    # Still open and still the serving side's: the next real move works as before.
    assert ok(await move(b, task_id, "completed"))["state"] == "completed"


async def test_same_message_id_with_other_content_is_a_409(mesh, db: asyncpg.Pool) -> None:
    a, b = await mesh.pair()
    task_id = (await a.send(b.agent_id, "sum"))["task_id"]
    ok(await move(b, task_id, "working"))
    message_id = f"m-{task_id}-x"
    ok(await move(b, task_id, "completed", message=text_message("42", message_id=message_id)))
    rows = await _rows(db, a, task_id)
    problem(await move(b, task_id, "completed",
                       message=text_message("43", message_id=message_id)), 409, message_id)
    # A new message with the repeat is not the same change either: the task is terminal.
    problem(await move(b, task_id, "completed",
                       message=text_message("42", message_id=f"{message_id}-2")), 409,
            "completed", "terminal")
    assert await _rows(db, a, task_id) == rows


async def test_another_agents_state_or_another_state_stays_a_409(mesh, db: asyncpg.Pool) -> None:
    a, b = await mesh.pair()
    task_id = (await a.send(b.agent_id, "go"))["task_id"]
    ok(await move(b, task_id, "canceled"))
    rows = await _rows(db, b, task_id)
    # The initiator asks for the state the serving agent set: not its change.
    body = problem(await move(a, task_id, "canceled"), 409, "canceled")
    assert body["current_state"] == "canceled"
    # The serving agent asks for a different state: an illegal move, as before.
    problem(await move(b, task_id, "rejected"), 409, "canceled", "terminal")
    assert await _rows(db, b, task_id) == rows

    # A fresh task is 'submitted' by nobody's move: asking for it again is a 409.
    fresh = (await a.send(b.agent_id, "again"))["task_id"]
    problem(await move(b, fresh, "submitted"), 409, "submitted")


async def test_concurrent_tries_of_one_change_commit_once(mesh, db: asyncpg.Pool) -> None:
    """A client that retries before its first try answered: one transition, one
    event, and every try gets the same 200 — with and without a message, many times
    (the tries interleave differently each round)."""
    a, b = await mesh.pair()
    for round_ in range(6):
        task_id = (await a.send(b.agent_id, f"race {round_}"))["task_id"]
        ok(await move(b, task_id, "working"))
        change: dict = {"state": "input-required"}
        if round_ % 2 == 0:
            change["message"] = text_message("which file?", message_id=f"m-{task_id}-q")
        before = await _rows(db, a, task_id)
        answers = await asyncio.gather(*(b.post(f"/v1/mesh/tasks/{task_id}/status", change)
                                         for _ in range(5)))
        assert [r.status_code for r in answers] == [200] * 5, [r.text for r in answers]
        assert len({r.text for r in answers}) == 1
        added = 1 if "message" in change else 0
        assert await _rows(db, a, task_id) == (before[0] + 1, before[1] + 1, before[2] + added)

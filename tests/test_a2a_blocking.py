"""A blocking SendMessage (ADR 036), with the official a2a-sdk client against real
gateways: the answer is the settled task; an offline recipient, returnImmediately
and a caller over its share of waits get the task as it is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from a2a.client import Client
from a2a.types.a2a_pb2 import GetTaskRequest, SendMessageConfiguration, Task, TaskState

from app.a2a import blocking
from tests.a2a_helpers import a2a_client, text_message
from tests.support.meshapi import AgentHandle, MeshFactory
from tests.support.pipeline import Pipeline
from tests.support.servers import serve_app

SUBMITTED = TaskState.TASK_STATE_SUBMITTED
COMPLETED = TaskState.TASK_STATE_COMPLETED


@pytest.fixture
async def patient(pipeline: Pipeline) -> AsyncIterator[str]:
    """A gateway whose SendMessage waits far longer than any test takes: a call
    answers when the task settles, or (over the bound) at once — never by the clock."""
    settings = pipeline.settings.model_copy(update={"a2a_blocking_seconds": 300.0})
    async with serve_app(settings) as url:
        yield url


async def _send(client: Client, text: str, *, task_id: str = "",
                return_immediately: bool = False, history: int | None = None) -> Task:
    request = text_message(text, task_id=task_id)
    request.configuration.CopyFrom(SendMessageConfiguration(
        return_immediately=return_immediately, history_length=history))
    [sent] = [e async for e in client.send_message(request)]
    return sent.task


async def _created(b: AgentHandle, count: int, after: int = 0) -> tuple[list[str], int]:
    """The recipient long-polls its inbox until ``count`` new tasks reached it."""
    found: list[str] = []
    while len(found) < count:
        page = await b.inbox(after=after, wait=10)
        found += [e["task_id"] for e in page["events"] if e["type"] == "task.created"]
        after = page["next_after"]
    return found, after


async def _status(b: AgentHandle, task_id: str, state: str, **body: Any) -> None:
    r = await b.post(f"/v1/mesh/tasks/{task_id}/status", {"state": state, **body})
    assert r.status_code == 200, r.text


async def _answer(b: AgentHandle, task_id: str, text: str) -> None:
    await _status(b, task_id, "working")
    await b.reply(task_id, text)
    await _status(b, task_id, "completed")


async def test_the_answer_is_the_completed_task(patient: str) -> None:
    async with MeshFactory.connect(patient) as mesh:
        a, b = await mesh.pair()
        async with a2a_client(patient, b.agent_id, a.headers, streaming=False) as client:
            call = asyncio.create_task(_send(client, "what is 6 x 7?"))
            [task_id], _ = await _created(b, 1)
            await _answer(b, task_id, "42")
            task = await call
    assert task.id == task_id and task.status.state == COMPLETED
    assert [m.parts[0].text for m in task.history] == ["what is 6 x 7?", "42"]


async def test_input_required_is_an_answer_and_the_reply_waits_for_the_next(
        patient: str) -> None:
    async with MeshFactory.connect(patient) as mesh:
        a, b = await mesh.pair()
        async with a2a_client(patient, b.agent_id, a.headers, streaming=False) as client:
            call = asyncio.create_task(_send(client, "book a table", history=1))
            [task_id], after = await _created(b, 1)
            await _status(b, task_id, "working")
            await _status(b, task_id, "input-required",
                          message={"parts": [{"kind": "text", "text": "for how many?"}]})
            task = await call
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert task.status.message.parts[0].text == "for how many?"
            assert len(task.history) == 1  # historyLength is honoured

            # The reply to it does not answer with the input-required it replies to.
            reply = asyncio.create_task(_send(client, "four", task_id=task_id))
            while True:
                page = await b.inbox(after=after, wait=10)
                after = page["next_after"]
                if any(e["type"] == "task.message" for e in page["events"]):
                    break
            assert not reply.done()
            await _answer(b, task_id, "booked for four")
            done = await reply
    assert done.status.state == COMPLETED
    assert done.history[-1].parts[0].text == "booked for four"


async def test_an_offline_recipient_leaves_the_task_submitted_after_the_window(
        gateway: str, mesh: MeshFactory) -> None:
    # The session gateway's window is short (tests/conftest.py); b never reads.
    a, b = await mesh.pair()
    async with a2a_client(gateway, b.agent_id, a.headers, streaming=False) as client:
        task = await _send(client, "are you there?")
    assert task.status.state == SUBMITTED
    assert task.history[0].parts[0].text == "are you there?"


async def test_return_immediately_answers_with_the_submitted_task(patient: str) -> None:
    async with MeshFactory.connect(patient) as mesh:
        a, b = await mesh.pair()
        async with a2a_client(patient, b.agent_id, a.headers, streaming=False) as client:
            task = await _send(client, "fire and forget", return_immediately=True)
            assert task.status.state == SUBMITTED
            [task_id], _ = await _created(b, 1)
    assert task_id == task.id


async def test_waits_beyond_the_callers_share_answer_at_once(patient: str) -> None:
    async with MeshFactory.connect(patient) as mesh:
        a, b = await mesh.pair()
        c = await (await mesh.owner()).agent("other-caller")
        await mesh.befriend(c, b)
        async with a2a_client(patient, b.agent_id, a.headers, streaming=False) as client, \
                a2a_client(patient, b.agent_id, c.headers, streaming=False) as other:
            bound = blocking.PER_CALLER
            waiting = [asyncio.create_task(_send(client, f"job {i}")) for i in range(bound)]
            # Each wait's slot is taken before its message is written, so once b has
            # every one of them, all are counted (and none can settle: b has not acted).
            held, after = await _created(b, bound)
            # An attacker's burst: many more at once, each of which would wait.
            attempts = 20
            extra = await asyncio.gather(*(_send(client, f"one too many {i}")
                                           for i in range(attempts)))
            assert [t.status.state for t in extra] == [SUBMITTED] * attempts
            assert not any(w.done() for w in waiting)

            # Meanwhile the gateway serves a's other calls and another caller's wait.
            got = await client.get_task(GetTaskRequest(id=held[0]))
            assert got.status.state == SUBMITTED
            r = await a.get("/v1/mesh/tasks")
            assert r.status_code == 200, r.text
            theirs = asyncio.create_task(_send(other, "mine waits"))
            created, after = await _created(b, 1 + attempts, after)
            [their_id] = [t for t in created if t not in {e.id for e in extra}]
            await _answer(b, their_id, "yours")
            assert (await theirs).status.state == COMPLETED
            assert not any(w.done() for w in waiting)

            for task_id in held:
                await _answer(b, task_id, "done")
            answered = await asyncio.gather(*waiting)
            assert {t.status.state for t in answered} == {COMPLETED}
            assert sorted(t.id for t in answered) == sorted(held)
            # The slots are back: a waits again.
            again = asyncio.create_task(_send(client, "after the rush"))
            [last], _ = await _created(b, 1, after)
            await _answer(b, last, "still here")
            assert (await again).status.state == COMPLETED


def test_the_process_bound_counts_every_caller_and_slots_come_back() -> None:
    slots = blocking.WaitSlots(per_caller=2, per_process=3)
    with slots.take("a@x") as a1, slots.take("a@x") as a2, slots.take("a@x") as a3:
        assert (a1, a2, a3) == (True, True, False)  # a's share is 2
        with slots.take("b@y") as b1, slots.take("c@z") as c1:
            assert (b1, c1) == (True, False)  # the process's 3 are taken
    with slots.take("a@x") as again, slots.take("c@z") as c2:
        assert (again, c2) == (True, True)  # given back on exit

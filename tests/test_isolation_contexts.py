"""A context belongs to its participants (ADR 030): nobody joins alice↔bob's
conversation by naming its context_id — not a stranger with only an owner token,
not a friend of bob's who takes no part in it — over REST or A2A, and nobody
outside it reads it through the timelines or the task list's filter."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from a2a.client.errors import A2AClientError

from tests.a2a_helpers import a2a_client
from tests.a2a_helpers import text_message as a2a_text
from tests.api_helpers import ok, problem, text_message
from tests.support.meshapi import AgentHandle, MeshFactory, OwnerHandle


def task_in(context_id: str, to: str, text: str) -> dict[str, object]:
    return {"to_agent_id": to, "context_id": context_id, "message": text_message(text)}


async def conversation(mesh: MeshFactory) -> tuple[AgentHandle, AgentHandle, str]:
    """alice's a and bob's b, friends, with one task and its reply in a context."""
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "the quarterly numbers, privately")
    await b.reply(task["task_id"], "here they are")
    return a, b, task["context_id"]


async def senders_in(db: asyncpg.Pool, context_id: str) -> set[str]:
    rows = await db.fetch("SELECT DISTINCT sender FROM task_messages WHERE context_id = $1",
                          context_id)
    return {r["sender"] for r in rows}


async def test_strangers_and_friends_cannot_join_or_read_a_context(
        gateway: str, mesh: MeshFactory, db: asyncpg.Pool) -> None:
    a, b, ctx = await conversation(mesh)
    mallory: OwnerHandle = await mesh.owner()
    m = await mallory.agent("m")
    friend = await (await mesh.owner()).agent("f")  # a friend of bob's, not in the context
    await mesh.befriend(friend, b)

    # Writes naming the context, each to someone the writer may otherwise reach.
    writes = [
        (mallory, m.agent_id),       # only an owner token: human@mallory → her own agent
        (m, mallory.human),          # her agent → her human
        (friend, b.agent_id),        # bob's friend → bob
    ]
    answers = [await w.post("/v1/mesh/tasks", task_in(ctx, to, f"let me in {i}"))
               for i, (w, to) in enumerate(writes)]
    for resp in answers:
        problem(resp, 403, ctx, "take part")
    # The same over A2A: SendMessage with the context's contextId.
    a2a_refused = 0
    async with a2a_client(gateway, b.agent_id, friend.headers, streaming=False) as client:
        request = a2a_text("let me in over A2A")
        request.message.context_id = ctx
        with pytest.raises(A2AClientError, match=r"-32050.*take part"):
            [_ async for _ in client.send_message(request)]
        a2a_refused += 1

    # Reads: the timelines answer as for a context that does not exist, the task
    # list's filter shows nothing.
    reads = [await m.get(f"/v1/mesh/contexts/{ctx}/timeline"),
             await friend.get(f"/v1/mesh/contexts/{ctx}/timeline"),
             await mallory.get(f"/v1/mesh/contexts/{ctx}/timeline"),
             await mallory.get(f"/v1/contexts/{ctx}/timeline")]
    for resp in reads:
        problem(resp, 404, ctx)
    for reader in (m, friend, mallory):
        assert ok(await reader.get("/v1/mesh/tasks", params={"context_id": ctx}))["tasks"] == []

    assert len(answers) + a2a_refused == 4 and len(reads) == 4
    assert await senders_in(db, ctx) == {a.agent_id, b.agent_id}

    # The participants themselves may go on naming their context, with anyone they
    # may reach — that is how a conversation grows.
    ok(await a.post("/v1/mesh/tasks", task_in(ctx, b.agent_id, "a second task")), 201)
    ok(await b.post("/v1/mesh/tasks", task_in(ctx, friend.agent_id, "bob brings f in")), 201)
    # …and f, brought in by bob, now takes part.
    ok(await friend.post("/v1/mesh/tasks", task_in(ctx, b.agent_id, "f answers in it")), 201)


async def test_a_new_context_id_is_free_and_then_belongs_to_its_writer(
        mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    c = await (await mesh.owner()).agent("c")
    await mesh.befriend(c, b)
    fresh = f"ctx-{a.agent_id}-fresh"
    ok(await a.post("/v1/mesh/tasks", task_in(fresh, b.agent_id, "first")), 201)
    problem(await c.post("/v1/mesh/tasks", task_in(fresh, b.agent_id, "mine now?")), 403,
            fresh)


async def test_refused_creates_in_a_batch_spend_no_seq(mesh: MeshFactory) -> None:
    """Concurrent creates share one statement (ADR 028): the refused ones are not
    written and take no seq from the recipient; the allowed ones all land."""
    a, b, ctx = await conversation(mesh)
    intruder = await (await mesh.owner()).agent("x")
    await mesh.befriend(intruder, b)
    before = ok(await b.get("/v1/mesh/me"))["inbox_seq"]
    sends = [a.post("/v1/mesh/tasks", task_in(ctx, b.agent_id, f"ok {i}")) for i in range(20)]
    sends += [intruder.post("/v1/mesh/tasks", task_in(ctx, b.agent_id, f"no {i}"))
              for i in range(20)]
    answers = await asyncio.gather(*sends)
    assert [r.status_code for r in answers] == [201] * 20 + [403] * 20
    events = (await b.inbox(after=before))["events"]
    assert [e["seq"] for e in events] == list(range(before + 1, before + 21))
    assert {e["from_agent_id"] for e in events} == {a.agent_id}

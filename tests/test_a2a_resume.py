"""A2A streams read from the caller's durable inbox: cut twice mid-task and
resumed after the last seq seen, the client gets every event once, in order
(ADR 017; the behaviour A2A #1986 asks for)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from a2a.types.a2a_pb2 import StreamResponse, SubscribeToTaskRequest, TaskState

from tests.a2a_helpers import a2a_client, resume_from, seq_of, text_message
from tests.support.meshapi import AgentHandle, MeshFactory

N = 240  # replies; with the two status changes, 242 events


async def _serve(b: AgentHandle, task_id: str, cut1: asyncio.Event,
                 cut2: asyncio.Event) -> None:
    """The serving agent works through the mesh API while the A2A client comes and goes."""
    r = await b.post(f"/v1/mesh/tasks/{task_id}/status", {"state": "working"})
    assert r.status_code == 200, r.text
    for i in range(N):
        if i == 100:
            await cut1.wait()  # the rest of these arrive while the client is away
        if i == 170:
            await cut2.wait()
        await b.reply(task_id, f"r{i}")
    r = await b.post(f"/v1/mesh/tasks/{task_id}/status", {"state": "completed"})
    assert r.status_code == 200, r.text


async def _take(stream: AsyncIterator[StreamResponse], seen: list[StreamResponse],
                upto: int | None) -> None:
    """Events after the snapshot until ``seen`` holds ``upto`` (None: the stream's end)."""
    snapshot = await anext(stream)  # type: ignore[call-overload]
    assert snapshot.HasField("task"), snapshot  # the spec's snapshot comes first
    if upto is not None and len(seen) >= upto:
        return
    async for event in stream:
        seen.append(event)
        if upto is not None and len(seen) >= upto:
            return


async def test_a_cut_stream_resumes_after_its_last_seq_with_every_event_once(
        gateway: str, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    cut1, cut2 = asyncio.Event(), asyncio.Event()
    seen: list[StreamResponse] = []
    request = text_message("count for me")
    async with asyncio.timeout(180), a2a_client(gateway, b.agent_id, a.headers) as client:
        # 1. SendStreamingMessage, cut after 50 events.
        stream = client.send_message(request)
        snapshot = await anext(stream)
        task_id = snapshot.task.id
        assert snapshot.task.status.state == TaskState.TASK_STATE_SUBMITTED
        assert seq_of(snapshot) == 0  # nothing of this task in a's inbox yet
        producer = asyncio.create_task(_serve(b, task_id, cut1, cut2))
        async for event in stream:
            seen.append(event)
            if len(seen) == 50:
                break
        await stream.aclose()  # type: ignore[attr-defined]
        cut1.set()

        # 2. The dropped SendStreamingMessage, sent again (same messageId: the same
        #    task, no second message) and resumed after its last seq; cut at 150.
        stream = client.send_message(request, context=resume_from(seq_of(seen[-1])))
        await _take(stream, seen, 150)
        await stream.aclose()  # type: ignore[attr-defined]
        cut2.set()

        # 3. SubscribeToTask after the last seq, to the end of the task.
        stream = client.subscribe(SubscribeToTaskRequest(id=task_id),
                                  context=resume_from(seq_of(seen[-1])))
        await _take(stream, seen, None)
        await producer

    seqs = [seq_of(e) for e in seen]
    assert seqs == sorted(set(seqs)), "a seq was repeated or came out of order"
    assert len(seen) == N + 2
    assert all(e.HasField("status_update") for e in seen)
    first, *middle, last = [e.status_update.status for e in seen]
    assert first.state == TaskState.TASK_STATE_WORKING
    assert [s.message.parts[0].text for s in middle] == [f"r{i}" for i in range(N)]
    assert {s.state for s in middle} == {TaskState.TASK_STATE_WORKING}
    assert last.state == TaskState.TASK_STATE_COMPLETED
    # The stream ended by itself at the terminal state; the re-sent message was a replay.
    r = await a.get(f"/v1/mesh/tasks/{task_id}")
    assert [m["parts"][0]["text"] for m in r.json()["messages"]][:2] == ["count for me", "r0"]
    assert len(r.json()["messages"]) == N + 1


async def test_a_resumed_subscription_of_a_finished_task_replays_what_was_missed(
        gateway: str, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    async with asyncio.timeout(60), a2a_client(gateway, b.agent_id, a.headers) as client:
        stream = client.send_message(text_message("quick one"))
        task_id = (await anext(stream)).task.id
        await stream.aclose()  # type: ignore[attr-defined]
        await b.reply(task_id, "done already")
        r = await b.post(f"/v1/mesh/tasks/{task_id}/status", {"state": "working"})
        assert r.status_code == 200, r.text
        r = await b.post(f"/v1/mesh/tasks/{task_id}/status", {"state": "completed"})
        assert r.status_code == 200, r.text
        events = [e async for e in client.subscribe(SubscribeToTaskRequest(id=task_id),
                                                    context=resume_from(0))]
    assert events[0].task.status.state == TaskState.TASK_STATE_COMPLETED
    states = [e.status_update.status.state for e in events[1:]]
    # The reply came while the task was still submitted, and says so on replay.
    assert states == [TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING,
                      TaskState.TASK_STATE_COMPLETED]
    assert events[1].status_update.status.message.parts[0].text == "done already"
    assert [seq_of(e) for e in events[1:]] == sorted({seq_of(e) for e in events[1:]})


async def test_revoking_the_callers_key_ends_its_stream(gateway: str, mesh: MeshFactory) -> None:
    alice = await mesh.owner()
    a = await alice.agent("a")
    b = await (await mesh.owner()).agent("b")
    await mesh.befriend(a, b)
    async with asyncio.timeout(60), a2a_client(gateway, b.agent_id, a.headers) as client:
        stream = client.send_message(text_message("long job"))
        await anext(stream)
        await b.reply((await a.get("/v1/mesh/tasks")).json()["tasks"][0]["task_id"], "on it")
        assert (await anext(stream)).status_update.status.message.parts[0].text == "on it"
        r = await alice.delete(f"/v1/agents/{a.agent_id}/keys/{a.key_id}")
        assert r.status_code == 204, r.text
        assert [e async for e in stream] == []  # ended by the revocation, not by a timeout


"""The SDK's HTTP+JSON binding under the same URL, behind the same guard."""

from __future__ import annotations

import asyncio

import pytest
from a2a.client import A2AClientError
from a2a.types.a2a_pb2 import GetTaskRequest, SubscribeToTaskRequest, TaskState

from tests.a2a_helpers import a2a_client, resume_from, seq_of, text_message
from tests.support.meshapi import MeshFactory


async def test_rest_binding_sends_reads_and_resumes(gateway: str, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    async with asyncio.timeout(60), a2a_client(gateway, b.agent_id, a.headers,
                                               binding="HTTP+JSON") as client:
        stream = client.send_message(text_message("over REST"))
        task_id = (await anext(stream)).task.id
        await stream.aclose()  # type: ignore[attr-defined]
        await b.reply(task_id, "answer 1")
        for state in ("working", "completed"):
            r = await b.post(f"/v1/mesh/tasks/{task_id}/status", {"state": state})
            assert r.status_code == 200, r.text
        got = await client.get_task(GetTaskRequest(id=task_id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        events = [e async for e in client.subscribe(SubscribeToTaskRequest(id=task_id),
                                                    context=resume_from(0))]
    assert events[0].HasField("task")
    assert [e.status_update.status.state for e in events[1:]] == [
        TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_COMPLETED]
    assert [seq_of(e) for e in events[1:]] == sorted({seq_of(e) for e in events[1:]})

    stranger = await (await mesh.owner()).agent("s")
    async with a2a_client(gateway, b.agent_id, stranger.headers, streaming=False,
                          binding="HTTP+JSON") as client:
        with pytest.raises(A2AClientError, match="403"):
            await client.get_task(GetTaskRequest(id=task_id))

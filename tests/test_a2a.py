"""A2A v1.0 over the real gateway and pipeline, with the official a2a-sdk client
(ADR 017): offline recipients, permissions, idempotency, cards."""

from __future__ import annotations

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import ParseDict

from tests.a2a_helpers import a2a_client, text_message
from tests.support.meshapi import MeshFactory


async def _first_event(b, type_: str, after: int = 0) -> dict:  # type: ignore[no-untyped-def]
    """The recipient reads its normal inbox (long-poll) until an event of ``type_``."""
    while True:
        page = await b.inbox(after=after, wait=10)
        for ev in page["events"]:
            if ev["type"] == type_:
                return ev  # type: ignore[no-any-return]
        after = page["next_after"]


async def test_cards_validate_against_the_sdk(gateway: str, mesh: MeshFactory) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        gateway_card = await A2ACardResolver(http, gateway).get_agent_card()
        assert gateway_card.name == "Agent Mesh"
        assert "{agent_id}" in gateway_card.supported_interfaces[0].url
        raw = (await http.get(f"{gateway}/a2a/x@y/.well-known/agent-card.json")).json()
    public = ParseDict(raw, AgentCard())  # strict: a clean v1.0 card (ADR 034)
    assert public.supported_interfaces[0].url.endswith("/a2a/x@y")
    assert public.supported_interfaces[0].protocol_version == "1.0"
    assert set(public.security_schemes) == {"meshBearer", "meshApiKey"}
    assert public.capabilities.streaming and public.capabilities.extended_agent_card
    assert public.capabilities.extensions[0].uri.endswith("/resume/v1")

    a, b = await mesh.pair()
    owner_b = await mesh.owner()
    c = await owner_b.agent("coder", display_name="The Coder", description="writes code",
                            skills=[{"id": "py", "name": "Python"}])
    await mesh.befriend(a, c)
    async with a2a_client(gateway, c.agent_id, a.headers) as client:
        full = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
    assert full.name == "The Coder" and full.description == "writes code"
    assert [(s.id, s.name) for s in full.skills] == [("py", "Python")]


async def test_offline_agent_gets_the_task_and_its_reply_reaches_the_a2a_client(
        gateway: str, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()  # b runs no daemon and holds no stream: it is offline
    async with a2a_client(gateway, b.agent_id, a.headers, streaming=False) as client:
        [sent] = [e async for e in client.send_message(text_message("summarise the report"))]
        task = sent.task
        assert task.status.state == TaskState.TASK_STATE_SUBMITTED
        assert task.history[0].parts[0].text == "summarise the report"

        # b comes online later and finds it in its normal inbox.
        created = await _first_event(b, "task.created")
        assert created["task_id"] == task.id
        assert created["from_agent_id"] == a.agent_id
        assert created["payload"]["message"]["parts"] == [
            {"kind": "text", "text": "summarise the report"}]
        r = await b.post(f"/v1/mesh/tasks/{task.id}/status", {"state": "working"})
        assert r.status_code == 200, r.text
        await b.reply(task.id, "here is the summary")
        r = await b.post(f"/v1/mesh/tasks/{task.id}/status", {"state": "completed"})
        assert r.status_code == 200, r.text

        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        assert [m.parts[0].text for m in got.history] == ["summarise the report",
                                                          "here is the summary"]
        assert [m.role for m in got.history] == [1, 2]  # ROLE_USER, ROLE_AGENT
        listed = await client.list_tasks(ListTasksRequest())
        assert [t.id for t in listed.tasks] == [task.id]
        done = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_WORKING))
        assert list(done.tasks) == []
    async with a2a_client(gateway, b.agent_id, a.headers) as client:
        with pytest.raises(UnsupportedOperationError):  # terminal, and no resume asked
            async for _ in client.subscribe(SubscribeToTaskRequest(id=task.id)):
                pass


async def test_a_follow_up_message_on_the_task_reaches_the_recipient(
        gateway: str, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    async with a2a_client(gateway, b.agent_id, a.headers, streaming=False) as client:
        [sent] = [e async for e in client.send_message(text_message("first"))]
        [more] = [e async for e in client.send_message(
            text_message("second", task_id=sent.task.id))]
    assert [m.parts[0].text for m in more.task.history] == ["first", "second"]
    ev = await _first_event(b, "task.message")
    assert ev["payload"]["message"]["parts"][0]["text"] == "second"


async def test_a_retried_message_id_is_one_mesh_message(gateway: str,
                                                        mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    async with a2a_client(gateway, b.agent_id, a.headers, streaming=False) as client:
        request = text_message("once only", message_id="m-a2a-retry-1-" + b.agent_id[:8])
        tasks = set()
        for _ in range(3):
            [sent] = [e async for e in client.send_message(request)]
            tasks.add(sent.task.id)
        other = text_message("other content", message_id=request.message.message_id)
        with pytest.raises(InvalidRequestError, match="already used for different content"):
            [_ async for _ in client.send_message(other)]
    assert len(tasks) == 1
    r = await a.get("/v1/mesh/tasks")
    assert [t["task_id"] for t in r.json()["tasks"]] == list(tasks)
    page = await b.inbox(wait=5)
    created = [e for e in page["events"] if e["type"] == "task.created"]
    assert len(created) == 1


async def test_strangers_anonymous_callers_and_other_tenants_are_refused(
        gateway: str, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    stranger = await (await mesh.owner()).agent("s")
    # A stranger may not reach b: refused at the door with 403 (A2A's HTTP answer).
    async with a2a_client(gateway, b.agent_id, stranger.headers, streaming=False) as client:
        with pytest.raises(A2AClientError, match="403"):
            [_ async for _ in client.send_message(text_message("hello?"))]
    # Without credentials: 401.
    async with a2a_client(gateway, b.agent_id, {}, streaming=False) as client:
        with pytest.raises(A2AClientError, match="401"):
            [_ async for _ in client.send_message(text_message("hello?"))]
    r = await a.http.post(f"{gateway}/a2a/{b.agent_id}", json={"jsonrpc": "2.0"})
    assert r.status_code == 401 and "bearer" in r.json()["detail"]
    # Another pair's task is not found, never shown.
    async with a2a_client(gateway, b.agent_id, a.headers, streaming=False) as client:
        [sent] = [e async for e in client.send_message(text_message("private"))]
    c, d = await mesh.pair()
    await mesh.befriend(c, b)
    async with a2a_client(gateway, b.agent_id, c.headers, streaming=False) as client:
        for call in (client.get_task(GetTaskRequest(id=sent.task.id)),
                     client.cancel_task(CancelTaskRequest(id=sent.task.id))):
            with pytest.raises(TaskNotFoundError):
                await call
        with pytest.raises(TaskNotFoundError):
            [_ async for _ in client.send_message(text_message("x", task_id=sent.task.id))]
        assert list((await client.list_tasks(ListTasksRequest())).tasks) == []
    # a's own task, asked for at another agent's endpoint, is not found either.
    await mesh.befriend(a, c)
    async with a2a_client(gateway, c.agent_id, a.headers, streaming=False) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=sent.task.id))


async def test_cancel_and_api_key_auth(gateway: str, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    async with a2a_client(gateway, b.agent_id, {"X-API-Key": a.api_key},
                          streaming=False) as client:
        [sent] = [e async for e in client.send_message(text_message("never mind"))]
        canceled = await client.cancel_task(CancelTaskRequest(id=sent.task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=sent.task.id))
    ev = await _first_event(b, "task.status")
    assert ev["payload"]["state"] == "canceled"
    async with a2a_client(gateway, b.agent_id, {"X-API-Key": "mk_nope_nope"},
                          streaming=False) as client:
        with pytest.raises(A2AClientError, match="401"):
            await client.get_task(GetTaskRequest(id=sent.task.id))


async def test_invalid_messages_are_invalid_params(gateway: str, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    async with a2a_client(gateway, b.agent_id, a.headers, streaming=False) as client:
        with pytest.raises(InvalidParamsError, match="message_id"):
            [_ async for _ in client.send_message(text_message("x", message_id="!bad id"))]
        with pytest.raises(InvalidParamsError, match="NUL"):
            [_ async for _ in client.send_message(text_message("nul \x00 here"))]


async def test_v03_method_names_on_the_same_endpoint(gateway: str, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
        "kind": "message", "messageId": "m-v03-" + b.agent_id[2:10], "role": "user",
        "parts": [{"kind": "text", "text": "old client"}]}}}
    r = await a.post(f"/a2a/{b.agent_id}", body)
    assert r.status_code == 200, r.text
    task = r.json()["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "submitted"
    r = await a.post(f"/a2a/{b.agent_id}", {"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
                                            "params": {"id": task["id"]}})
    assert r.json()["result"]["history"][0]["parts"] == [{"kind": "text", "text": "old client"}]
    ev = await _first_event(b, "task.created")
    assert ev["task_id"] == task["id"]


async def test_required_fields_are_checked(gateway: str, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    body = {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {
        "role": "ROLE_USER", "parts": [{"text": "no id"}]}}}
    r = await a.http.post(f"/a2a/{b.agent_id}", json=body,
                          headers={**a.headers, "A2A-Version": "1.0"})
    assert r.status_code == 200, r.text
    assert r.json()["error"]["code"] == -32602, r.text  # invalid params
    assert "task.created" not in [e["type"] for e in (await b.inbox())["events"]]

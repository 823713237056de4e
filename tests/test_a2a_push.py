"""A2A push notifications over the real gateway and the real webhook worker
(ADR 039): the official a2a-sdk client registers a config, a real HTTP receiver
gets the task's updates in order, once each, with the configured headers; the
config is its registrant's alone; bad input is InvalidParams, never a 5xx.

The receivers listen on 127.0.0.1, so the gateway and worker run with
MESH_WEBHOOK_ALLOW_PRIVATE=true except where a test checks the SSRF rule.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    SendMessageConfiguration,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from app.platform.db import create_pool
from app.platform.settings import Settings
from tests.a2a_helpers import a2a_client, text_message
from tests.api_helpers import until
from tests.support.isolated import isolated_settings
from tests.support.meshapi import AgentHandle, MeshFactory
from tests.support.push_receiver import PushReceiver
from tests.support.servers import serve_app
from workers import webhook as webhook_worker
from workers.runtime import running

FAST = {
    "webhook_allow_private": True,
    "webhook_timeout_seconds": 2.0,
    "webhook_retry_base_seconds": 0.02,
    "webhook_retry_cap_seconds": 0.1,
    "webhook_cooldown_seconds": 0.1,
    "webhook_cooldown_max_seconds": 0.4,
    "webhook_sweep_seconds": 0.5,
    "a2a_blocking_seconds": 0.0,  # SendMessage answers at once: the task as it is
}
INVALID_PARAMS = -32602
TASK_NOT_FOUND = -32001


@dataclass
class Pushing:
    url: str
    mesh: MeshFactory
    pool: asyncpg.Pool
    a: AgentHandle  # the initiator: registers configs
    b: AgentHandle  # the serving agent: changes the task

    async def task(self) -> str:
        async with a2a_client(self.url, self.b.agent_id, self.a.headers,
                              streaming=False) as client:
            [sent] = [e async for e in client.send_message(text_message("do the thing"))]
        return sent.task.id

    async def rpc(self, who: AgentHandle, target: AgentHandle, method: str,
                  params: Any) -> httpx.Response:
        return await who.http.post(f"/a2a/{target.agent_id}", json={
            "jsonrpc": "2.0", "id": 1, "method": method, "params": params},
            headers={**who.headers, "A2A-Version": "1.0"})

    async def progress(self, task_id: str) -> None:
        """The serving agent's four updates: working, a message, an artifact, done."""
        await ok(self.b.post(f"/v1/mesh/tasks/{task_id}/status", {"state": "working"}))
        await self.b.reply(task_id, "halfway there")
        await ok(self.b.post(f"/v1/mesh/tasks/{task_id}/artifacts",
                             {"name": "out", "parts": [{"kind": "text", "text": "result"}]}))
        await ok(self.b.post(f"/v1/mesh/tasks/{task_id}/status", {"state": "completed"}))


async def ok(call: Any) -> Any:
    response = await call
    assert response.status_code < 300, response.text
    return response


@contextlib.asynccontextmanager
async def pushing(base: Settings, worker: dict[str, Any] | None = None,
                  **overrides: Any) -> AsyncIterator[Pushing]:
    settings = await isolated_settings(base, **(FAST | overrides))
    worker_settings = Settings(**(settings.model_dump() | (worker or {})))
    pool = await create_pool(settings, min_size=1, max_size=4)
    try:
        async with serve_app(settings) as url, MeshFactory.connect(url) as mesh, \
                running(webhook_worker.build, worker_settings):
            a, b = await mesh.pair()
            yield Pushing(url, mesh, pool, a, b)
    finally:
        await pool.close()


def config(task_id: str, url: str, **kw: Any) -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(task_id=task_id, url=url, **kw)


async def test_updates_arrive_in_order_once_with_the_configured_headers(migrated):
    async with pushing(migrated) as p, PushReceiver() as rx:
        task_id = await p.task()
        async with a2a_client(p.url, p.b.agent_id, p.a.headers) as client:
            made = await client.create_task_push_notification_config(config(
                task_id, rx.url, id="phone", token="tok-123",
                authentication=AuthenticationInfo(scheme="Bearer", credentials="s3cret")))
            assert (made.id, made.task_id, made.url) == ("phone", task_id, rx.url)
            # Write-only: neither the token nor the credentials come back.
            assert made.authentication.scheme == "Bearer"
            assert not made.authentication.credentials and not made.token

            await p.progress(task_id)
            await rx.wait(lambda r: len(r.received) >= 4)
            kinds = [e.event.WhichOneof("payload") for e in rx.received]
            assert kinds == ["status_update", "status_update", "artifact_update",
                             "status_update"]
            first, message, artifact, done = (getattr(e.event, k) for e, k in
                                              zip(rx.received, kinds, strict=True))
            assert first.status.state == TaskState.TASK_STATE_WORKING
            assert message.status.message.parts[0].text == "halfway there"
            assert artifact.artifact.parts[0].text == "result"
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert {e.event.status_update.task_id or e.event.artifact_update.task_id
                    for e in rx.received} == {task_id}
            seqs = [int(x.metadata["agent-mesh.seq"]) for x in (first, message, artifact, done)]
            assert seqs == sorted(seqs) and len(set(seqs)) == 4
            for pushed in rx.received:
                assert pushed.headers["authorization"] == "Bearer s3cret"
                assert pushed.headers["x-a2a-notification-token"] == "tok-123"
                assert pushed.headers["content-type"] == "application/json"

            # Once: the cursor is past the last, and nothing more was sent.
            await until(lambda: p.pool.fetchval(
                "SELECT last_seq = $1 AND lease_owner IS NULL FROM task_push_configs "
                "WHERE task_id = $2", seqs[-1], task_id))
            assert rx.requests == 4 and len(rx.received) == 4

            got = await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="phone"))
            assert (got.id, got.url) == ("phone", rx.url)
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id))
            assert [c.id for c in listed.configs] == ["phone"]
            await client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="phone"))
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id))
            assert list(listed.configs) == []
            with pytest.raises(TaskNotFoundError):
                await client.get_task_push_notification_config(
                    GetTaskPushNotificationConfigRequest(task_id=task_id, id="phone"))


async def test_failures_are_retried_in_order_and_nothing_is_sent_twice(migrated):
    failing = {1, 2, 4}  # the first two attempts, then one in the middle
    async with pushing(migrated) as p, \
            PushReceiver(behaviour=lambda n: "fail" if n in failing else "ok") as rx:
        task_id = await p.task()
        async with a2a_client(p.url, p.b.agent_id, p.a.headers,
                              binding="HTTP+JSON") as client:  # the REST binding too
            await client.create_task_push_notification_config(config(task_id, rx.url))
        await p.progress(task_id)
        await rx.wait(lambda r: len(r.received) >= 4)
        seqs = [int((e.event.status_update.metadata or e.event.artifact_update.metadata)
                    ["agent-mesh.seq"]) for e in rx.received]
        assert seqs == sorted(set(seqs)) and len(seqs) == 4
        await until(lambda: p.pool.fetchval(
            "SELECT last_seq = $1 AND failures = 0 FROM task_push_configs WHERE task_id = $2",
            seqs[-1], task_id))
        assert rx.requests == 4 + len(failing)


async def test_a_config_set_with_the_message_gets_the_whole_task(migrated):
    async with pushing(migrated) as p, PushReceiver() as rx:
        request = text_message("with a push config")
        request.configuration.CopyFrom(SendMessageConfiguration(
            task_push_notification_config=TaskPushNotificationConfig(url=rx.url, token="t")))
        async with a2a_client(p.url, p.b.agent_id, p.a.headers, streaming=False) as client:
            [sent] = [e async for e in client.send_message(request)]
            task_id = sent.task.id
            await p.progress(task_id)
            await rx.wait(lambda r: len(r.received) >= 4)
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id))
        assert [c.id for c in listed.configs] == [task_id]  # the default id: the task's
        assert rx.received[-1].event.status_update.status.state == \
            TaskState.TASK_STATE_COMPLETED


async def test_nobody_else_reads_or_deletes_a_config(migrated):
    async with pushing(migrated) as p, PushReceiver() as rx:
        task_id = await p.task()
        made = await p.rpc(p.a, p.b, "CreateTaskPushNotificationConfig",
                           {"taskId": task_id, "id": "mine", "url": rx.url})
        assert "result" in made.json(), made.text
        stranger = await (await p.mesh.owner()).agent("stranger")
        await p.mesh.befriend(stranger, p.b)  # may talk to b, but is not in the task
        refused = 0
        for who, target in ((stranger, p.b), (p.b, p.a)):  # b serves the task: still not its
            for method in ("GetTaskPushNotificationConfig", "DeleteTaskPushNotificationConfig"):
                r = await p.rpc(who, target, method, {"taskId": task_id, "id": "mine"})
                assert r.status_code == 200 and r.json()["error"]["code"] == TASK_NOT_FOUND
                refused += 1
            r = await p.rpc(who, target, "ListTaskPushNotificationConfigs", {"taskId": task_id})
            body = r.json()
            assert body.get("error", {}).get("code") == TASK_NOT_FOUND or \
                body["result"].get("configs", []) == [], body
            refused += 1
        r = await p.rpc(stranger, p.b, "CreateTaskPushNotificationConfig",
                        {"taskId": task_id, "id": "mine", "url": rx.url + "/evil"})
        assert r.json()["error"]["code"] == TASK_NOT_FOUND
        refused += 1
        assert refused == 7
        # Still there, still a's, still pointing where a said.
        rows = await p.pool.fetch("SELECT agent_id, url FROM task_push_configs "
                                  "WHERE task_id = $1", task_id)
        assert [(r["agent_id"], r["url"]) for r in rows] == [(p.a.agent_id, rx.url)]
        async with a2a_client(p.url, p.b.agent_id, stranger.headers) as client:
            with pytest.raises(TaskNotFoundError):
                await client.get_task_push_notification_config(
                    GetTaskPushNotificationConfigRequest(task_id=task_id, id="mine"))


@pytest.mark.parametrize("params, says", [
    ({"url": "ftp://example.com/x"}, "scheme"),
    ({"url": "not a url"}, "scheme"),
    ({}, "url"),
    ({"url": "http://127.0.0.1:1/x", "authentication": {"scheme": "Bearer"}}, "credentials"),
    ({"url": "http://127.0.0.1:1/x",
      "authentication": {"scheme": "Bearer", "credentials": "a\r\nX-Evil: 1"}}, "header"),
    ({"url": "http://127.0.0.1:1/x", "authentication": {"scheme": "Bad Scheme",
                                                         "credentials": "c"}}, "scheme"),
    ({"url": "http://127.0.0.1:1/x", "token": "t" * 5000}, "at most"),
    ({"url": "http://127.0.0.1:1/x", "id": "i" * 500}, "id"),
    ({"url": 42}, ""),
])
async def test_bad_configs_are_invalid_params(migrated, params, says):
    async with pushing(migrated) as p:
        task_id = await p.task()
        r = await p.rpc(p.a, p.b, "CreateTaskPushNotificationConfig",
                        {"taskId": task_id, **params})
        assert r.status_code == 200, r.text
        error = r.json()["error"]
        assert error["code"] == INVALID_PARAMS, error
        assert says in error["message"] + str(error.get("data"))  # the SDK's: in data
        assert await p.pool.fetchval("SELECT count(*) FROM task_push_configs") == 0


async def test_bad_reads_and_unknown_tasks_are_json_rpc_errors(migrated):
    async with pushing(migrated) as p:
        task_id = await p.task()
        calls = [
            ("ListTaskPushNotificationConfigs", {"taskId": task_id, "pageSize": 1000},
             INVALID_PARAMS),
            ("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "x" * 500},
             INVALID_PARAMS),
            ("GetTaskPushNotificationConfig", {"taskId": str(uuid.uuid4()), "id": "x"},
             TASK_NOT_FOUND),
            ("CreateTaskPushNotificationConfig",
             {"taskId": str(uuid.uuid4()), "url": "http://127.0.0.1:1/"}, TASK_NOT_FOUND),
            ("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "none"},
             TASK_NOT_FOUND),
        ]
        for method, params, code in calls:
            r = await p.rpc(p.a, p.b, method, params)
            assert r.status_code == 200, r.text
            assert r.json()["error"]["code"] == code, (method, r.text)


async def test_too_many_configs_on_one_task(migrated):
    async with pushing(migrated) as p:
        task_id = await p.task()
        for i in range(10):
            r = await p.rpc(p.a, p.b, "CreateTaskPushNotificationConfig",
                            {"taskId": task_id, "id": f"c{i}", "url": "http://127.0.0.1:1/"})
            assert "result" in r.json(), r.text
        r = await p.rpc(p.a, p.b, "CreateTaskPushNotificationConfig",
                        {"taskId": task_id, "id": "c10", "url": "http://127.0.0.1:1/"})
        assert r.json()["error"]["code"] == INVALID_PARAMS
        # Replacing one by its id is not a new one.
        r = await p.rpc(p.a, p.b, "CreateTaskPushNotificationConfig",
                        {"taskId": task_id, "id": "c3", "url": "http://127.0.0.1:2/"})
        assert r.json()["result"]["url"] == "http://127.0.0.1:2/"


async def test_ssrf_refused_at_registration(migrated):
    async with pushing(migrated, webhook_allow_private=False) as p:
        task_id = await p.task()
        for url in ("http://127.0.0.1:8080/", "http://169.254.169.254/latest/meta-data",
                    "http://[::ffff:10.0.0.1]/", "http://localhost/", "http://10.1.2.3/"):
            r = await p.rpc(p.a, p.b, "CreateTaskPushNotificationConfig",
                            {"taskId": task_id, "url": url})
            error = r.json()["error"]
            assert error["code"] == INVALID_PARAMS and "refused" in error["message"], url
        assert await p.pool.fetchval("SELECT count(*) FROM task_push_configs") == 0


async def test_ssrf_refused_at_connect_time(migrated):
    # Registered while the gateway allowed it; the worker's own rule still refuses.
    async with pushing(migrated, worker={"webhook_allow_private": False}) as p, \
            PushReceiver() as rx:
        task_id = await p.task()
        r = await p.rpc(p.a, p.b, "CreateTaskPushNotificationConfig",
                        {"taskId": task_id, "url": rx.url})
        assert "result" in r.json()
        await ok(p.b.post(f"/v1/mesh/tasks/{task_id}/status", {"state": "working"}))
        error = await until(lambda: p.pool.fetchval(
            "SELECT last_error FROM task_push_configs WHERE task_id = $1", task_id))
        assert "loopback" in error
        assert rx.requests == 0

"""The outbound A2A bridge against a real A2A server (ADR 041).

The remote is the official SDK's server with a scripted executor
(tests/support/a2a_remote.py) on 127.0.0.1, so these gateways run with
MESH_WEBHOOK_ALLOW_PRIVATE=true. The bridge is the worker
``python -m workers.a2a_bridge`` builds — in this event loop, or as real
processes for the kill -9 test.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from app.platform.db import create_pool
from app.platform.settings import Settings
from tests.api_helpers import ok, until
from tests.support.a2a_remote import Remote
from tests.support.isolated import isolated_settings
from tests.support.meshapi import AgentHandle, MeshFactory, OwnerHandle
from tests.support.procs import MeshProcess
from tests.support.servers import serve_app
from workers import a2a_bridge
from workers.runtime import running

FAST = {
    "webhook_allow_private": True,
    "webhook_timeout_seconds": 5.0,
    "a2a_bridge_retry_base_seconds": 0.05,
    "a2a_bridge_retry_cap_seconds": 0.3,
    "a2a_bridge_poll_base_seconds": 0.05,
    "a2a_bridge_poll_cap_seconds": 0.3,
    "a2a_bridge_sweep_seconds": 0.5,
}


@dataclass
class Bridged:
    settings: Settings
    mesh: MeshFactory
    pool: asyncpg.Pool
    owner: OwnerHandle  # owns the bridged agents
    caller: AgentHandle  # another owner's agent that sends them tasks

    async def register(self, remote: Remote, name: str = "helper",
                       headers: dict[str, str] | None = None) -> dict[str, Any]:
        """A bridged agent of ``owner``, befriended by ``caller`` as any agent is."""
        a2a: dict[str, Any] = {"card_url": remote.card_url}
        if headers:
            a2a["headers"] = headers
        agent = ok(await self.owner.post("/v1/agents", {"name": name, "a2a": a2a}), 201)
        req = ok(await self.caller.post("/v1/mesh/friends/requests",
                                        {"to_agent_id": agent["agent_id"]}), 201)
        ok(await self.owner.post(f"/v1/agents/{agent['agent_id']}/friends/requests/"
                                 f"{req['request_id']}/accept"))
        return agent  # type: ignore[no-any-return]

    async def task(self, task_id: str) -> dict[str, Any]:
        return ok(await self.caller.get(f"/v1/mesh/tasks/{task_id}"))  # type: ignore[no-any-return]

    async def settled(self, task_id: str, *states: str, timeout: float = 30.0) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            task = await self.task(task_id)
            return task if task["state"] in states else None

        return await until(check, timeout)  # type: ignore[no-any-return]


def texts(task: dict[str, Any], sender: str) -> list[str]:
    return [p["text"] for m in task["messages"] if m["sender"] == sender
            for p in m["parts"] if p["kind"] == "text"]


@contextlib.asynccontextmanager
async def bridged_mesh(base: Settings, *, bridge: bool = True,
                       **overrides: Any) -> AsyncIterator[Bridged]:
    settings = await isolated_settings(base, **(FAST | overrides))
    pool = await create_pool(settings, min_size=1, max_size=4)
    try:
        async with contextlib.AsyncExitStack() as stack:
            url = await stack.enter_async_context(serve_app(settings))
            mesh = await stack.enter_async_context(MeshFactory.connect(url))
            if bridge:
                await stack.enter_async_context(running(a2a_bridge.build, settings))
            owner = await mesh.owner()
            caller = await (await mesh.owner()).agent("caller")
            yield Bridged(settings, mesh, pool, owner, caller)
    finally:
        await pool.close()


# --- registration ------------------------------------------------------------------

async def test_registration_shows_kind_card_and_header_names_only(migrated):
    async with bridged_mesh(migrated, bridge=False) as b, Remote(api_key="k-123") as remote:
        agent = await b.register(remote, headers={"X-Api-Key": "k-123"})
        assert agent["kind"] == "a2a"
        assert agent["status"] == "active"  # its card answered
        assert agent["a2a"]["header_names"] == ["X-Api-Key"]
        assert agent["a2a"]["card"]["name"] == "Remote helper"
        assert agent["a2a"]["card"]["streaming"] is True
        assert agent["skills"][0]["id"] == "echo"
        for shown in (ok(await b.owner.get(f"/v1/agents/{agent['agent_id']}")),
                      ok(await b.owner.get("/v1/agents"))):
            assert "k-123" not in str(shown)
        stored = await b.pool.fetchval("SELECT headers FROM a2a_remotes WHERE agent_id = $1",
                                       agent["agent_id"])
        assert stored and "k-123" not in stored  # sealed at rest
        listed = ok(await b.owner.get("/v1/agents"))["agents"]
        assert [a["kind"] for a in listed if a["agent_id"] == agent["agent_id"]] == ["a2a"]
        native = ok(await b.owner.post("/v1/agents", {"name": "native"}), 201)
        assert native["kind"] == "normal" and native["a2a"] is None


@pytest.mark.parametrize("a2a, status, needle", [
    ({}, 422, "card_url"),
    ({"card_url": "ftp://example.com/card.json"}, 422, "scheme"),
    ({"card_url": "file:///etc/passwd"}, 422, "scheme"),
    ({"card_url": "http://169.254.169.254/latest/meta-data"}, 422, "link-local"),
    ({"card_url": "http://127.0.0.1:9/card"}, 422, "loopback"),
    ({"card_url": "http://10.0.0.7/card"}, 422, "private"),
    ({"card_url": "https://example.com/c", "headers": {"Host": "x"}}, 422, "Host"),
    ({"card_url": "https://example.com/c", "headers": {"X-K": "a\r\nb"}}, 422, "headers"),
    ({"card_url": "https://example.com/c", "headers": {"bad name": "v"}}, 422, "headers"),
])
async def test_bad_registration_is_a_problem(gateway, mesh, a2a, status, needle):
    owner = await mesh.owner()
    resp = await owner.post("/v1/agents", {"name": "remote", "a2a": a2a})
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert needle in resp.json()["detail"] or needle in str(resp.json().get("errors"))
    assert not [a for a in ok(await owner.get("/v1/agents"))["agents"]
                if a["name"] == "remote"]


async def test_a_card_that_is_not_a_card_is_refused(migrated):
    async with bridged_mesh(migrated, bridge=False) as b, Remote(api_key="right") as remote:
        resp = await b.owner.post("/v1/agents", {"name": "r", "a2a": {
            "card_url": remote.card_url, "headers": {"X-Api-Key": "wrong"}}})
        assert resp.status_code == 422 and "HTTP 401" in resp.json()["detail"]
        resp = await b.owner.post("/v1/agents", {"name": "r", "a2a": {
            "card_url": f"{remote.url}/nothing-here", "headers": {"X-Api-Key": "right"}}})
        assert resp.status_code == 422 and "HTTP 404" in resp.json()["detail"]


# --- forwarding ----------------------------------------------------------------------

@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "send+poll"])
async def test_a_task_is_answered_by_the_remote(migrated, streaming):
    async with bridged_mesh(migrated) as b, \
            Remote(streaming=streaming, api_key="k-1") as remote:
        agent = await b.register(remote, headers={"X-Api-Key": "k-1"})
        sent = await b.caller.send(agent["agent_id"], "hello there")
        task = await b.settled(sent["task_id"], "completed")
        assert texts(task, agent["agent_id"]) == ["you said: hello there"]
        assert remote.received == [sent["message"]["message_id"]]  # A2A messageId = mesh's
        assert remote.unauthorized == 0
        # The caller reads the reply in its inbox like any other.
        events = (await b.caller.inbox())["events"]
        assert [e["payload"]["state"] for e in events if e["type"] == "task.status"
                and e["task_id"] == sent["task_id"]] == ["working", "completed"]
        row = await b.pool.fetchrow("SELECT remote_task_id, last_state FROM a2a_remote_tasks "
                                    "WHERE task_id = $1", sent["task_id"])
        assert row["remote_task_id"] and row["last_state"] == "completed"


async def test_input_required_round_trip(migrated):
    async with bridged_mesh(migrated) as b, Remote() as remote:
        agent = await b.register(remote)
        sent = await b.caller.send(agent["agent_id"], "ask me")
        task = await b.settled(sent["task_id"], "input-required")
        assert texts(task, agent["agent_id"]) == ["which colour?"]
        reply = await b.caller.reply(sent["task_id"], "blue")
        task = await b.settled(sent["task_id"], "completed")
        assert texts(task, agent["agent_id"]) == ["which colour?", "colour noted: blue"]
        assert remote.received == [sent["message"]["message_id"], reply["message_id"]]
        # The reply went to the same remote task.
        assert len(set(remote.task_of.values())) == 1


async def test_remote_failure_fails_the_task_with_the_reason(migrated):
    async with bridged_mesh(migrated) as b, Remote() as remote:
        agent = await b.register(remote)
        sent = await b.caller.send(agent["agent_id"], "fail disk full")
        task = await b.settled(sent["task_id"], "failed")
        assert "the remote broke: disk full" in str(task["status_message"])


async def test_streamed_artifacts_and_messages_arrive_once_in_order(migrated):
    async with bridged_mesh(migrated) as b, Remote() as remote:
        agent = await b.register(remote)
        sent = await b.caller.send(agent["agent_id"], "stream 4")
        task = await b.settled(sent["task_id"], "completed")
        assert texts(task, agent["agent_id"]) == [f"part {i}" for i in range(4)] + ["stream done"]
        assert [a["artifact_id"] for a in task["artifacts"]] == [f"art-{i}" for i in range(4)]


async def test_permissions_apply_as_to_any_agent(migrated):
    async with bridged_mesh(migrated) as b, Remote() as remote:
        agent = await b.register(remote)
        stranger = await (await b.mesh.owner()).agent("stranger")
        resp = await stranger.post("/v1/mesh/tasks", {
            "to_agent_id": agent["agent_id"],
            "message": {"parts": [{"kind": "text", "text": "let me in"}]}})
        assert resp.status_code == 403, resp.text
        # Unfriended by its owner, the caller is refused too.
        ok(await b.owner.delete(f"/v1/agents/{agent['agent_id']}/friends/"
                                f"{b.caller.agent_id}"), 204)
        resp = await b.caller.post("/v1/mesh/tasks", {
            "to_agent_id": agent["agent_id"],
            "message": {"parts": [{"kind": "text", "text": "still there?"}]}})
        assert resp.status_code == 403, resp.text
        assert remote.received == []


async def test_a_group_brings_a_bridged_agent_and_a_stranger_together(migrated):
    """No friendship between them: a shared group is enough, as for any agents."""
    async with bridged_mesh(migrated) as b, Remote() as remote:
        agent = ok(await b.owner.post("/v1/agents", {"name": "helper", "a2a": {
            "card_url": remote.card_url}}), 201)
        front = await b.owner.agent("front")  # a friend of the other owner's agent
        await b.mesh.befriend(b.caller, front)
        resp = await b.caller.post("/v1/mesh/tasks", {
            "to_agent_id": agent["agent_id"],
            "message": {"parts": [{"kind": "text", "text": "not yet"}]}})
        assert resp.status_code == 403, resp.text
        ok(await b.owner.post("/v1/groups", {"group_id": f"g-{front.agent_id}",
                                             "name": "bridged"}), 201)
        for member in (agent["agent_id"], b.caller.agent_id):
            ok(await b.owner.post(f"/v1/groups/g-{front.agent_id}/members",
                                  {"agent_id": member}), 201)
        ok(await b.caller.post(f"/v1/mesh/groups/invitations/g-{front.agent_id}/accept"))
        sent = await b.caller.send(agent["agent_id"], "via the group")
        task = await b.settled(sent["task_id"], "completed")
        assert texts(task, agent["agent_id"]) == ["you said: via the group"]


async def test_a_cancel_by_the_caller_reaches_the_remote(migrated):
    async with bridged_mesh(migrated) as b, Remote() as remote:
        agent = await b.register(remote)
        sent = await b.caller.send(agent["agent_id"], "gate forever")
        await b.settled(sent["task_id"], "working")
        ok(await b.caller.post(f"/v1/mesh/tasks/{sent['task_id']}/status",
                               {"state": "canceled"}))

        async def canceled() -> bool:
            return bool(remote.canceled)

        await until(canceled)
        assert remote.canceled == [remote.task_of[sent["message"]["message_id"]]]
        assert (await b.task(sent["task_id"]))["state"] == "canceled"


async def test_remote_down_then_back_loses_nothing(migrated):
    async with bridged_mesh(migrated) as b:
        remote = Remote()
        await remote.start()
        agent = await b.register(remote)
        await remote.stop()
        first = await b.caller.send(agent["agent_id"], "one")
        second = await b.caller.send(agent["agent_id"], "two")

        async def inactive() -> bool:
            got = ok(await b.owner.get(f"/v1/agents/{agent['agent_id']}"))
            return got["status"] == "inactive" and got["a2a"]["failures"] > 0

        await until(inactive)
        await remote.start()
        try:
            for sent, text in ((first, "one"), (second, "two")):
                task = await b.settled(sent["task_id"], "completed")
                assert texts(task, agent["agent_id"]) == [f"you said: {text}"]
            assert remote.received == [first["message"]["message_id"],
                                       second["message"]["message_id"]]
            got = ok(await b.owner.get(f"/v1/agents/{agent['agent_id']}"))
            assert got["status"] == "active" and got["a2a"]["failures"] == 0
        finally:
            remote.open_gate()
            await remote.stop()


async def test_remote_killed_mid_stream_and_restarted(migrated):
    """The stream breaks after the first part; the bridge follows the task with
    GetTask until the remote is back: every message once, in order."""
    async with bridged_mesh(migrated) as b:
        remote = Remote()
        await remote.start()
        try:
            agent = await b.register(remote)
            sent = await b.caller.send(agent["agent_id"], "stream 5 gated")

            async def first_part() -> bool:
                return "part 0" in texts(await b.task(sent["task_id"]), agent["agent_id"])

            await until(first_part)
            await remote.stop()  # the stream is cut mid-task
            remote.open_gate()  # the remote's executor goes on meanwhile
            await remote.start()
            task = await b.settled(sent["task_id"], "completed")
            assert texts(task, agent["agent_id"]) == \
                [f"part {i}" for i in range(5)] + ["stream done"]
            assert [a["artifact_id"] for a in task["artifacts"]] == [f"art-{i}" for i in range(5)]
            assert remote.received == [sent["message"]["message_id"]]
        finally:
            remote.open_gate()
            await remote.stop()


async def test_two_bridges_kill_one_mid_batch_forward_nothing_twice(migrated):
    """Two real bridge processes share the agents; the one holding the agent is
    killed -9 while a remote task is open. The other takes the lease over when it
    lapses, follows the open task and forwards the rest: the remote's own log
    holds each mesh message id once."""
    async with bridged_mesh(migrated, bridge=False, a2a_bridge_lease_seconds=1.5) as b, \
            Remote() as remote:
        agent = await b.register(remote)
        bridges = [MeshProcess("a2a-bridge", b.settings) for _ in range(2)]
        try:
            for proc in bridges:
                await proc.start()
            first = await b.caller.send(agent["agent_id"], "plain one")
            gated = await b.caller.send(agent["agent_id"], "gate two")
            await b.settled(first["task_id"], "completed")

            async def accepted() -> str | None:
                row = await b.pool.fetchrow(
                    "SELECT t.remote_task_id, r.lease_owner FROM a2a_remote_tasks t "
                    "JOIN a2a_remotes r USING (agent_id) WHERE t.task_id = $1",
                    gated["task_id"])
                return row["lease_owner"] if row and row["remote_task_id"] else None

            holder = await until(accepted)
            rest = [await b.caller.send(agent["agent_id"], f"plain {i}") for i in range(3, 7)]
            victim = next(p for p in bridges if p.proc and f"-{p.proc.pid}-" in holder)
            victim.kill9()
            remote.open_gate()
            for sent in (gated, *rest):
                await b.settled(sent["task_id"], "completed", timeout=60)
            expected = [first, gated, *rest]
            assert sorted(remote.received) == sorted(s["message"]["message_id"]
                                                     for s in expected)
            assert len(remote.received) == len(set(remote.received)) == len(expected)
            task = await b.task(gated["task_id"])
            assert texts(task, agent["agent_id"]) == ["you said: gate two"]
        finally:
            for proc in bridges:
                proc.stop_quietly()


async def test_the_card_is_revalidated_with_its_etag(migrated):
    async with bridged_mesh(migrated, a2a_bridge_card_max_age_seconds=0) as b, \
            Remote() as remote:
        agent = await b.register(remote)
        etag = await b.pool.fetchval("SELECT card_etag FROM a2a_remotes WHERE agent_id = $1",
                                     agent["agent_id"])
        assert etag
        sent = await b.caller.send(agent["agent_id"], "hi")
        await b.settled(sent["task_id"], "completed")
        assert remote.not_modified >= 1  # asked with If-None-Match, not fetched anew
        assert await b.pool.fetchval("SELECT card_etag FROM a2a_remotes WHERE agent_id = $1",
                                     agent["agent_id"]) == etag

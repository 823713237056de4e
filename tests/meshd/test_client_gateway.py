"""The SDK against the real gateway: every agent endpoint, errors, retries, token renewal."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from devstack.process import free_port
from meshd import (
    AuthError,
    ConflictError,
    ForbiddenError,
    MeshClient,
    MeshConnectionError,
    NotFoundError,
    RateLimitedError,
    ValidationError,
)
from meshd.ids import new_message_id
from tests.meshd.support import GatewayProc, Proxy


def client_for(url: str, handle, **kw) -> MeshClient:
    return MeshClient(url, api_key=handle.api_key, **kw)


async def test_every_agent_endpoint(world, gateway, uniq):
    alice, bob = world.alice, world.bob
    a_h = await alice.agent(f"a{uniq}", description="asks things")
    b_h = await bob.agent(f"b{uniq}", description="answers", skills=[{"id": "qa", "name": "Q&A"}])
    c_h = await bob.agent(f"c{uniq}")
    async with client_for(gateway, a_h) as a, client_for(gateway, b_h) as b, client_for(gateway, c_h) as c:
        assert await a.authenticate() == a_h.agent_id
        me = await b.me()
        assert me["agent_id"] == b_h.agent_id and me["inbox_seq"] >= 0

        assert (await b.go_online())["status"] == "active"
        assert (await b.heartbeat())["status"] == "active"

        # friends: request, accept, list, card
        req = await a.request_friend(b_h.agent_id, note="hello")
        incoming = (await b.friends())["incoming_requests"]
        assert [r["request_id"] for r in incoming] == [req["request_id"]]
        await b.accept_friend(req["request_id"])
        assert b_h.agent_id in {f["agent_id"] for f in (await a.friends())["friends"]}
        card = await a.card(b_h.agent_id)
        assert card["skills"][0]["id"] == "qa" and card["description"] == "answers"
        req2 = await a.request_friend(c_h.agent_id)
        await c.reject_friend(req2["request_id"])
        with pytest.raises(ForbiddenError, match="friend request"):
            await a.send(c_h.agent_id, "hi")

        # groups: the owner adds its agent; the agent sees group and roster
        gid = f"g-{uniq}"
        assert (await bob.post("/v1/groups", {"group_id": gid, "name": "Team"})).status_code == 201
        for agent_id in (b_h.agent_id, c_h.agent_id):
            r = await bob.post(f"/v1/groups/{gid}/members", {"agent_id": agent_id})
            assert r.status_code == 201
        assert gid in [g["group_id"] for g in await b.groups()]
        roster = await b.roster(gid)
        assert {m["agent_id"] for m in roster["members"]} == {b_h.agent_id, c_h.agent_id}
        await b.send(c_h.agent_id, "group peers may talk")

        # a task from a to b, the whole life cycle
        task = await a.send(b_h.agent_id, "review PR 12", data={"pr": 12}, metadata={"k": "v"})
        assert task.state == "submitted" and task.serving_agent == b_h.agent_id
        page = await b.poll_inbox(me["acked_seq"])
        created = [e for e in page.events if e.task_id == task.task_id]
        assert created[0].type == "task.created" and created[0].text == "review PR 12"
        assert created[0].from_agent_id == a_h.agent_id
        await b.ack(created[0].seq)
        assert (await b.me())["acked_seq"] == created[0].seq

        reply = await b.reply(task.task_id, "on it")
        assert reply.message_id.startswith(f"m-{b_h.agent_id}-")
        await b.set_status(task.task_id, "working")
        art = await b.add_artifact(task.task_id, [{"kind": "text", "text": "LGTM"}], name="review")
        assert art["name"] == "review"
        await b.set_status(task.task_id, "completed", "done")
        full = await a.get_task(task.task_id)
        assert full.state == "completed" and full.terminal
        assert [m.text for m in full.messages] == ["review PR 12", "on it", "done"]
        assert full.artifacts[0]["artifact_id"] == art["artifact_id"]
        listed = await a.list_tasks(state="completed")
        assert task.task_id in [t.task_id for t in listed.tasks]

        with pytest.raises(ConflictError) as conflict:
            await a.reply(task.task_id, "one more thing")
        assert conflict.value.detail  # the gateway says why
        with pytest.raises(ConflictError):
            await b.set_status(task.task_id, "working")

        # a's inbox saw the reply, the status changes and the artifact, in order
        events = (await a.poll_inbox(0, limit=100)).events
        mine = [e.type for e in events if e.task_id == task.task_id]
        assert mine == [
            "task.message",
            "task.status",
            "task.artifact",
            "task.status",
        ]
        assert [e.seq for e in events] == sorted(e.seq for e in events)

        # SSE from a given seq delivers the same events
        got = []
        async for e in a.stream(events[-5].seq):
            got.append(e.seq)
            if e.seq == events[-1].seq:
                break
        assert got == [e.seq for e in events[-4:]]

        # friendship ends
        await a.remove_friend(b_h.agent_id)
        with pytest.raises(ForbiddenError):
            await a.send(b_h.agent_id, "still there?")

        await b.go_offline()
        assert (await b.me())["status"] == "draining"
        await b.go_inactive()
        assert (await b.me())["status"] == "inactive"


async def test_errors_carry_the_problem_detail(pair, gateway):
    a_h, _ = pair
    async with client_for(gateway, a_h) as a:
        with pytest.raises(NotFoundError) as nf:
            await a.send("nobody@nowhere", "hi")
        assert "nobody@nowhere" in nf.value.detail and nf.value.status == 404
        with pytest.raises(NotFoundError):
            await a.get_task("t-not-mine-123")
        with pytest.raises(ValidationError) as bad:
            await a.send("x y", "hi")
        assert bad.value.status == 422 and "to_agent_id" in bad.value.detail
    async with MeshClient(gateway, api_key="mk_nope_secret") as bad_key:
        with pytest.raises(AuthError, match="MESH_API_KEY"):
            await bad_key.me()


async def test_retried_write_is_stored_once(pair, gateway):
    a_h, b_h = pair
    async with client_for(gateway, a_h) as a, client_for(gateway, b_h) as b:
        mid = new_message_id(a_h.agent_id)
        t1 = await a.send(b_h.agent_id, "once", message_id=mid, task_id=f"t-x-{mid[-8:]}")
        t2 = await a.send(b_h.agent_id, "once", message_id=mid, task_id=f"t-x-{mid[-8:]}")
        assert t1.task_id == t2.task_id
        rid = new_message_id(b_h.agent_id)
        await b.reply(t1.task_id, "answer", message_id=rid)
        await b.reply(t1.task_id, "answer", message_id=rid)
        assert len((await a.get_task(t1.task_id)).messages) == 2
        with pytest.raises(ConflictError, match="different content"):
            await b.reply(t1.task_id, "another answer", message_id=rid)
        events = (await b.poll_inbox(0, limit=500)).events
        assert sum(1 for e in events if e.task_id == t1.task_id) == 1


async def test_401_renews_the_token_once_and_repeats_the_call(world, gateway, uniq):
    a_h = await world.alice.agent(f"k{uniq}")
    async with client_for(gateway, a_h) as a:
        await a.me()
        assert a.auth.refreshes == 1
        a.auth._token = "not-a-valid-token"  # as if it had expired
        assert (await a.me())["agent_id"] == a_h.agent_id
        assert a.auth.refreshes == 2
        # a revoked key: the renewal itself is refused, and that is final
        r = await world.alice.delete(f"/v1/agents/{a_h.agent_id}/keys/{a_h.key_id}")
        assert r.status_code in (200, 204)
        with pytest.raises(AuthError):
            await a.me()


async def test_unreachable_gateway_is_retried_then_reported():
    sent = 0

    async def count(request: httpx.Request) -> None:
        nonlocal sent
        sent += 1

    client = MeshClient(f"http://127.0.0.1:{free_port()}", token="t", max_attempts=3, retry_initial=0.01)
    client.http.event_hooks["request"].append(count)
    async with client:
        with pytest.raises(MeshConnectionError, match="cannot reach"):
            await client.me()
    assert sent == 3


async def test_503_is_retried(pair, gateway):
    a_h, _ = pair
    port = int(gateway.rsplit(":", 1)[1])
    async with Proxy(port) as proxy, client_for(proxy.url, a_h, retry_initial=0.01) as a:
        proxy.blocked.add("/v1/mesh/me")

        async def unblock(response: httpx.Response) -> None:
            if response.status_code == 503:
                proxy.blocked.clear()

        a.http.event_hooks["response"].append(unblock)
        assert (await a.me())["agent_id"] == a_h.agent_id
        assert proxy.refused_requests == 1


@pytest.mark.slow  # sleeps the server's Retry-After on purpose
async def test_429_waits_for_retry_after(pair, migrated):
    a_h, _ = pair
    gw = GatewayProc(migrated, ratelimit_enabled="true", ratelimit_rate=4, ratelimit_burst=2)
    await gw.start()
    try:
        async with client_for(gw.url, a_h, max_attempts=1) as strict:
            with pytest.raises(RateLimitedError) as limited:
                for _ in range(20):
                    await strict.heartbeat()
            assert limited.value.retry_after is not None and limited.value.retry_after > 0
        async with client_for(gw.url, a_h, max_attempts=20) as patient:
            results = await asyncio.gather(*(patient.heartbeat() for _ in range(8)))
            assert all(r["agent_id"] == a_h.agent_id for r in results)
    finally:
        await gw.kill()


async def test_owner_login_token_acts_as_the_human_agent(world, gateway):
    async with MeshClient(gateway, token=world.alice.token) as human:
        assert await human.agent_id() == world.alice.human
        assert not human.auth.can_refresh  # a static token: a 401 would be final
        assert (await human.me())["kind"] == "virtual-user"


async def test_a_repeated_status_change_is_answered_like_the_first(pair, gateway):
    """set_status retries like every write: the gateway answers a repeat of a change that
    already took effect with the original body and no new event (so no client workaround)."""
    a_h, b_h = pair
    async with client_for(gateway, a_h) as a, client_for(gateway, b_h) as b:
        task = await a.send(b_h.agent_id, "please")
        first = await b.set_status(task.task_id, "working")
        assert await b.set_status(task.task_id, "working") == first
        mid = new_message_id(b_h.agent_id)
        done = await b.set_status(task.task_id, "completed", "done", message_id=mid)
        assert await b.set_status(task.task_id, "completed", "done", message_id=mid) == done
        with pytest.raises(ConflictError):  # the same id with another note is not a repeat
            await b.set_status(task.task_id, "completed", "other", message_id=mid)
        events = (await a.poll_inbox(0, limit=500)).events
        assert [e.payload["state"] for e in events if e.task_id == task.task_id] == ["working", "completed"]

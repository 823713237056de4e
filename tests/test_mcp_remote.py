"""The gateway's remote MCP endpoint (``/mcp``), driven by the official ``mcp`` client
over Streamable HTTP against the real gateway: both protocol eras, every tool,
authentication, bad JSON-RPC, and two clients of one agent sharing its inbox."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from meshd.catalogue import SPECS
from tests.api_helpers import ok, text_message, until
from tests.support.meshapi import AgentHandle, MeshFactory

ERAS = ["initialize", "discover"]  # protocol 2025-11-25 (handshake) and 2026-07-28 (stateless)


@contextlib.asynccontextmanager
async def session(base: str, token: str, era: str = "initialize") -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as s,
    ):
        await (s.initialize() if era == "initialize" else s.discover())
        yield s


async def call(s: ClientSession, name: str, **args: Any) -> tuple[Any, str | None]:
    result = await s.call_tool(name, args)
    text = "".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        return None, text
    data = result.structured_content
    return (data if data is not None else json.loads(text)), None


async def friends_and_group(mesh: MeshFactory) -> tuple[AgentHandle, AgentHandle, AgentHandle, str]:
    """a (alice's) and b (bob's) are friends; b is in bob's group; s is a stranger."""
    alice, bob = await mesh.owner(), await mesh.owner()
    a, b = await alice.agent("a"), await bob.agent("b")
    await mesh.befriend(a, b)
    stranger = await (await mesh.owner()).agent("s")
    gid = f"g{b.key_id[:8]}".lower()
    ok(await bob.post("/v1/groups", {"group_id": gid, "name": "MCP"}), 201)
    ok(await bob.post(f"/v1/groups/{gid}/members", {"agent_id": b.agent_id}), 201)
    return a, b, stranger, gid


@pytest.mark.parametrize("era", ERAS)
async def test_every_tool_over_streamable_http(mesh, gateway, era):
    a, b, stranger, gid = await friends_and_group(mesh)
    async with session(gateway, b.api_key, era) as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert set(tools) == set(SPECS)  # the one catalogue, as mesh mcp lists it
        for name, t in tools.items():
            assert t.description == SPECS[name].description
            assert t.input_schema == SPECS[name].input_schema

        me, _ = await call(s, "mesh_whoami")
        assert me["agent_id"] == b.agent_id
        friends, _ = await call(s, "mesh_list_friends")
        assert a.agent_id in [f["agent_id"] for f in friends["friends"]]
        groups, _ = await call(s, "mesh_list_groups")
        assert gid in [g["group_id"] for g in groups["groups"]]
        roster, _ = await call(s, "mesh_get_roster", group_id=gid)
        assert [m["agent_id"] for m in roster["members"]] == [b.agent_id]
        card, _ = await call(s, "mesh_get_agent_card", agent_id=a.agent_id)
        assert card["agent_id"] == a.agent_id

        sent, _ = await call(s, "mesh_send_message", to_agent_id=a.agent_id, text="hi a",
                             data={"k": 1}, complexity="low")
        assert sent["state"] == "submitted" and sent["serving_agent"] == a.agent_id
        got = ok(await a.get(f"/v1/mesh/tasks/{sent['task_id']}"), 200)
        assert got["messages"][0]["parts"] == [{"kind": "text", "text": "hi a"},
                                               {"kind": "data", "data": {"k": 1}}]
        assert got["messages"][0]["metadata"] == {"complexity": "low"}

        # work arrives; the model reads it, answers and closes the task
        task = await a.send(b.agent_id, "summarise PR 7")
        inbox, _ = await call(s, "mesh_check_inbox", wait_seconds=10)
        new = [e for e in inbox["events"] if e.get("task_id") == task["task_id"]]
        assert new[0]["type"] == "task.created" and new[0]["text"] == "summarise PR 7"
        assert new[0]["from"] == a.agent_id
        again, _ = await call(s, "mesh_check_inbox")
        assert again["count"] == 0  # acked when handed over
        acked = ok(await b.get("/v1/mesh/me"), 200)
        assert acked["acked_seq"] == acked["inbox_seq"]

        replied, _ = await call(s, "mesh_reply", task_id=task["task_id"], text="LGTM")
        assert replied["sent"]
        for state in ("working", "completed"):
            out, _ = await call(s, "mesh_set_task_status", task_id=task["task_id"], state=state,
                                message="ok")
            assert out["state"] == state
        detail, _ = await call(s, "mesh_get_task", task_id=task["task_id"])
        assert detail["state"] == "completed"
        assert [m["text"] for m in detail["messages"]][:2] == ["summarise PR 7", "LGTM"]
        line, _ = await call(s, "mesh_get_timeline", context_id=task["context_id"])
        assert [e["kind"] for e in line["entries"]][:2] == ["task", "message"]

        posted, _ = await call(s, "mesh_notify_group", group_id=gid, text="hello team")
        assert posted["recipients"] == 0  # b is the only member
        cast, _ = await call(s, "mesh_broadcast", text="vote?", to_agent_ids=[a.agent_id],
                             policy="any", timeout_seconds=60)
        assert cast["status"] == "open" and len(cast["task_ids"]) == 1
        found, _ = await call(s, "mesh_search_directory", query="nothing-matches-this-zzz")
        assert found == {"agents": []}
        peek, _ = await call(s, "mesh_check_inbox", mark_read=False)
        assert isinstance(peek["events"], list)

        # failures come back as tool errors that say what to do next
        _, err = await call(s, "mesh_set_task_status", task_id=task["task_id"], state="working")
        assert "mesh_get_task" in err and "working →" in err
        _, err = await call(s, "mesh_reply", task_id=task["task_id"], text="more")
        assert "mesh_send_message" in err
        _, err = await call(s, "mesh_send_message", to_agent_id=stranger.agent_id, text="x")
        assert "mesh_list_friends" in err
        _, err = await call(s, "mesh_get_task", task_id="t-does-not-exist")
        assert err.startswith("Not found")
        _, err = await call(s, "mesh_send_message", to_agent_id="bad id", text="x")
        assert "Invalid input" in err
        _, err = await call(s, "mesh_check_inbox", wait_seconds=99)
        assert "Invalid input" in err and "wait_seconds" in err
        _, err = await call(s, "mesh_get_roster")
        assert "Invalid input" in err and "group_id" in err
        _, err = await call(s, "mesh_reply", task_id=task["task_id"], text="nul \x00 here")
        assert "Invalid input" in err
        _, err = await call(s, "mesh_broadcast", text="x", policy="n")
        assert "Invalid input" in err


async def test_a_key_acts_only_as_its_own_agent(mesh, gateway):
    a, b, _stranger, _gid = await friends_and_group(mesh)
    c = await (await mesh.owner()).agent("c")
    await mesh.befriend(b, c)
    private = await b.send(c.agent_id, "between b and c")  # a takes no part in it
    async with session(gateway, a.api_key) as s:
        me, _ = await call(s, "mesh_whoami")
        assert me["agent_id"] == a.agent_id
        _, err = await call(s, "mesh_get_task", task_id=private["task_id"])
        assert err.startswith("Not found")
        _, err = await call(s, "mesh_reply", task_id=private["task_id"], text="let me in")
        assert err.startswith("Not found")
        _, err = await call(s, "mesh_set_task_status", task_id=private["task_id"], state="canceled")
        assert err.startswith("Not found")
        _, err = await call(s, "mesh_get_timeline", context_id=private["context_id"])
        assert err
        # b's inbox is b's: a's check_inbox never hands over b's events
        inbox, _ = await call(s, "mesh_check_inbox")
        assert private["task_id"] not in [e.get("task_id") for e in inbox["events"]]
    assert ok(await b.get("/v1/mesh/me"), 200)["acked_seq"] == 0


async def test_an_access_token_works_like_the_key(mesh, gateway):
    a, _b, _s, _g = await friends_and_group(mesh)
    async with session(gateway, a.token, "discover") as s:
        me, _ = await call(s, "mesh_whoami")
    assert me["agent_id"] == a.agent_id


def _initialize() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}}


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def test_no_wrong_or_revoked_credentials_get_the_rfc9728_challenge(mesh, gateway):
    owner = await mesh.owner()
    agent = await owner.agent("x")
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        meta_url = f"{gateway}/.well-known/oauth-protected-resource/mcp"
        wrongs: list[dict[str, str]] = [
            {},
            {"Authorization": "Basic dXNlcjpwYXNz"},
            {"Authorization": "Bearer"},
            {"Authorization": "Bearer mk_nope_nope"},
            {"Authorization": "Bearer not-a-jwt"},
        ]
        for extra in wrongs:
            r = await http.post("/mcp", json=_initialize(), headers={**MCP_HEADERS, **extra})
            assert r.status_code == 401, (extra, r.text)
            challenge = r.headers["www-authenticate"]
            assert challenge.startswith("Bearer ") and f'resource_metadata="{meta_url}"' in challenge
            assert r.headers["content-type"].startswith("application/problem+json")

        r = await http.post("/mcp", json=_initialize(),
                            headers={**MCP_HEADERS, "Authorization": f"Bearer {agent.api_key}"})
        assert r.status_code == 200 and r.json()["result"]["serverInfo"]["name"] == "agent-mesh"
        ok(await owner.delete(f"/v1/agents/{agent.agent_id}/keys/{agent.key_id}"), 204)
        for token in (agent.api_key, agent.token):
            r = await http.post("/mcp", json=_initialize(),
                                headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"})
            assert r.status_code == 401
            assert 'error="invalid_token"' in r.headers["www-authenticate"]

        for path in ("/.well-known/oauth-protected-resource/mcp",
                     "/.well-known/oauth-protected-resource"):
            doc = ok(await http.get(path), 200)
            assert doc["resource"] == f"{gateway}/mcp"
            assert doc["bearer_methods_supported"] == ["header"]


async def test_foreign_browser_origins_are_refused(mesh, gateway):
    agent = await (await mesh.owner()).agent("o")
    auth = {**MCP_HEADERS, "Authorization": f"Bearer {agent.api_key}"}
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        for origin in ("https://evil.example", "http://localhost.evil.example", "null"):
            r = await http.post("/mcp", json=_initialize(), headers={**auth, "Origin": origin})
            assert r.status_code == 403, origin
        r = await http.post("/mcp", json=_initialize(), headers={**auth, "Origin": gateway})
        assert r.status_code == 200


async def test_bad_json_rpc_gets_json_rpc_errors_never_a_5xx(mesh, gateway):
    agent = await (await mesh.owner()).agent("j")
    auth = {**MCP_HEADERS, "Authorization": f"Bearer {agent.api_key}"}
    modern = {**auth, "MCP-Protocol-Version": "2026-07-28"}

    def call_body(method: str, params: Any, rid: Any = 7) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode()

    tools_call = "tools/call"
    bodies: list[tuple[dict[str, str], bytes]] = []
    for headers in (auth, modern):
        bodies += [(headers, b) for b in (
            b"", b"garbage", b"{", b"[]", b"null", b"42", b'"str"', b"[1,2]",
            b'{"jsonrpc":"1.0","id":1,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}',
            b'{"jsonrpc":"2.0","method":"tools/list"}',
            b'{"jsonrpc":"2.0","id":1}',
            b"\xff\xfe\x00",
            call_body("no/such/method", {}),
            call_body("tools/list", "not an object"),
            call_body(tools_call, {}),
            call_body(tools_call, {"name": 5}),
            call_body(tools_call, {"name": "mesh_nope", "arguments": {}}),
            call_body(tools_call, {"name": "mesh_whoami", "arguments": "x"}),
            call_body(tools_call, {"name": "mesh_get_task", "arguments": {"task_id": 5}}),
            call_body(tools_call, {"name": "mesh_check_inbox", "arguments": {"limit": "many"}}),
            call_body(tools_call, {"name": "mesh_get_task", "arguments": {"task_id": "x" * 100_000}}),
            call_body("initialize", {"protocolVersion": 3}),
            call_body("server/discover", None),
        )]
    bodies.append(({**auth, "MCP-Protocol-Version": "1999-01-01"}, call_body("tools/list", {})))
    bodies.append(({**auth, "Content-Type": "text/plain"}, call_body("tools/list", {})))
    statuses: list[int] = []
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        for headers, raw in bodies:
            r = await http.post("/mcp", content=raw, headers=headers)
            statuses.append(r.status_code)
            assert r.status_code < 500, (raw[:80], r.status_code, r.text[:300])
            if r.headers.get("content-type", "").startswith("application/json") and r.content:
                answer = r.json()
                if "error" in answer:
                    assert isinstance(answer["error"]["code"], int)
                else:  # a tool error is a result with isError, never a crash
                    assert answer["result"].get("isError") is True, raw[:80]
        for method in ("GET", "DELETE", "PUT", "PATCH"):  # no stream, no session to end
            async with asyncio.timeout(10):  # answered, not held open
                r = await http.request(method, "/mcp", headers=auth)
            statuses.append(r.status_code)
            assert r.status_code == 405, (method, r.status_code)
    assert len(statuses) == len(bodies) + 4 == 54
    assert all(s < 500 for s in statuses)


async def test_two_clients_of_one_agent_never_both_get_an_event(mesh, gateway):
    a, b, _s, _g = await friends_and_group(mesh)
    total = 50
    got: dict[str, list[dict[str, Any]]] = {"one": [], "two": []}

    def jobs() -> int:
        return sum(e["type"] == "task.created" for e in got["one"] + got["two"])

    async def drain(name: str, s: ClientSession, stop: asyncio.Event) -> None:
        while not stop.is_set():
            inbox, err = await call(s, "mesh_check_inbox", wait_seconds=1, limit=3)
            assert err is None, err
            got[name] += inbox["events"]

    async with session(gateway, b.api_key) as one, session(gateway, b.api_key, "discover") as two:
        stop = asyncio.Event()
        readers = [asyncio.create_task(drain("one", one, stop)),
                   asyncio.create_task(drain("two", two, stop))]
        for i in range(total):
            ok(await a.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id,
                                               "message": text_message(f"job {i}")}), 201)
        await until(lambda: asyncio.sleep(0, jobs() >= total))
        stop.set()
        await asyncio.gather(*readers)
    one, two = ({e["seq"] for e in got[k]} for k in ("one", "two"))
    seen = [e["seq"] for e in got["one"] + got["two"]]
    assert len(seen) == len(set(seen))  # no event went to both clients, nor twice to one
    assert not one & two
    assert jobs() == total  # and every job went to one of them
    assert one and two  # both took part


async def test_calls_count_as_the_agents_heartbeat(mesh, gateway):
    owner = await mesh.owner()
    agent = await owner.agent("h")
    before = ok(await owner.get(f"/v1/agents/{agent.agent_id}"), 200)
    assert before["last_heartbeat_at"] is None
    async with session(gateway, agent.api_key) as s:
        await call(s, "mesh_whoami")
    after = ok(await owner.get(f"/v1/agents/{agent.agent_id}"), 200)
    assert after["status"] == "active" and after["last_heartbeat_at"] is not None


async def test_mcp_is_not_in_the_openapi_document(gateway):
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        spec = ok(await http.get("/openapi.json"), 200)
    assert not [p for p in spec["paths"] if p.startswith("/mcp") or "well-known" in p]

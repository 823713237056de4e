"""Owners, agents, API keys, agent tokens, presence: success and failure paths."""

from __future__ import annotations

import hashlib
import json
import uuid

import httpx
import pytest
from httpx_sse import aconnect_sse

from app.platform.settings import Settings
from app.services import security
from tests.api_helpers import ok, problem, text_message
from tests.support.meshapi import AgentHandle
from tests.support.procs import MeshProcess

PASSWORD = "correct horse battery"


# --- register / login ----------------------------------------------------------------

async def test_register_creates_owner_and_virtual_user(mesh, db):
    username = f"u{uuid.uuid4().hex[:10]}"
    resp = await mesh.http.post("/v1/auth/register",
                                json={"username": username, "password": PASSWORD})
    body = ok(resp, 201)
    assert body["username"] == username
    assert body["virtual_agent_id"] == f"human@{username}"
    assert body["is_admin"] is False
    stored = await db.fetchval("SELECT password_hash FROM users WHERE username = $1", username)
    assert stored.startswith("$argon2") and PASSWORD not in stored
    kind = await db.fetchval("SELECT kind FROM agents WHERE agent_id = $1", f"human@{username}")
    assert kind == "virtual-user"


async def test_register_twice_is_409(mesh):
    owner = await mesh.owner()
    resp = await mesh.http.post("/v1/auth/register",
                                json={"username": owner.username, "password": PASSWORD})
    problem(resp, 409, owner.username, "taken")


@pytest.mark.parametrize(("body", "field"), [
    ({"username": "Upper", "password": PASSWORD}, "username"),
    ({"username": "ab", "password": PASSWORD}, "username"),
    ({"username": "has space", "password": PASSWORD}, "username"),
    ({"username": "fine-name", "password": "short"}, "password"),
    ({"password": PASSWORD}, "username"),
    ({"username": "fine-name", "password": PASSWORD, "admin": True}, "admin"),
])
async def test_register_validation(mesh, body, field):
    resp = await mesh.http.post("/v1/auth/register", json=body)
    data = problem(resp, 422, field)
    assert field in {e["field"] for e in data["errors"]}


async def test_login(mesh):
    owner = await mesh.owner()
    resp = await mesh.http.post("/v1/auth/login",
                                json={"username": owner.username, "password": PASSWORD})
    body = ok(resp)
    assert body["token_type"] == "bearer" and body["expires_in"] > 0 and body["access_token"]
    wrong = await mesh.http.post("/v1/auth/login",
                                 json={"username": owner.username, "password": "not it at all"})
    problem(wrong, 401, "wrong username or password")
    assert wrong.headers.get("www-authenticate") == "Bearer"
    unknown = await mesh.http.post("/v1/auth/login",
                                   json={"username": "nobody-" + uuid.uuid4().hex[:8],
                                         "password": PASSWORD})
    problem(unknown, 401, "wrong username or password")


async def test_registration_can_be_disabled(migrated: Settings):
    from tests.support.servers import serve_app

    closed = migrated.model_copy(update={"registration_enabled": False})
    async with serve_app(closed) as url, httpx.AsyncClient(base_url=url) as http:
        resp = await http.post("/v1/auth/register",
                               json={"username": f"u{uuid.uuid4().hex[:10]}", "password": PASSWORD})
        problem(resp, 403, "registration is disabled")


# --- auth failures --------------------------------------------------------------------

@pytest.mark.parametrize("header", [None, "Basic abc", "Bearer", "Bearer not-a-jwt"])
async def test_bad_bearer_is_401(mesh, header):
    headers = {"Authorization": header} if header is not None else {}
    for path in ("/v1/agents", "/v1/mesh/me"):
        resp = await mesh.http.get(path, headers=headers)
        problem(resp, 401)
        assert resp.headers.get("www-authenticate") == "Bearer"


async def test_token_signed_with_another_secret_is_401(mesh, migrated):
    a, _ = await mesh.pair()
    other = migrated.model_copy(update={"jwt_secret": "another-secret-" + "y" * 32})
    forged, _ = security.issue_token(other, "agent", a.agent_id, key_id=a.key_id)
    resp = await mesh.http.get("/v1/mesh/me", headers={"Authorization": f"Bearer {forged}"})
    problem(resp, 401, "invalid token")


async def test_the_gateway_refuses_to_start_with_the_default_jwt_secret(migrated: Settings):
    """Anyone can read the default secret in the source and sign owner tokens
    with it: outside development the gateway does not start with it."""
    default = Settings.model_fields["jwt_secret"].default
    forgeable = migrated.model_copy(update={"jwt_secret": default})
    web = MeshProcess("web", forgeable)
    try:
        with pytest.raises(RuntimeError) as refused:
            await web.start()
        assert web.proc is not None and web.proc.returncode not in (0, None)
        assert "MESH_JWT_SECRET" in str(refused.value)
        assert "MESH_ENV=dev" in str(refused.value)
    finally:
        web.stop_quietly()
    # In development the default is allowed (the embedded stack generates one anyway).
    dev = MeshProcess("web", forgeable, env="dev")
    try:
        await dev.start()
        async with httpx.AsyncClient(base_url=dev.url) as http:
            assert (await http.get("/healthz")).status_code == 200
    finally:
        dev.stop_quietly()


async def test_expired_token_is_401(mesh, migrated):
    a, _ = await mesh.pair()
    past = migrated.model_copy(update={"agent_token_ttl_seconds": -60})
    expired, _ = security.issue_token(past, "agent", a.agent_id, key_id=a.key_id)
    resp = await mesh.http.get("/v1/mesh/me", headers={"Authorization": f"Bearer {expired}"})
    problem(resp, 401, "expired")


async def test_agent_token_on_owner_endpoint_is_403(mesh):
    a, _ = await mesh.pair()
    problem(await a.get("/v1/agents"), 403, "owner token")
    problem(await a.post("/v1/groups", {"group_id": "g-x-1", "name": "x"}), 403, "owner token")


# --- agents CRUD ----------------------------------------------------------------------

async def test_agent_crud(mesh):
    owner = await mesh.owner()
    created = ok(await owner.post("/v1/agents", {
        "name": "coder", "display_name": "Coder", "description": "writes code",
        "skills": [{"id": "py", "name": "Python", "tags": ["code"]}]}), 201)
    agent_id = f"coder@{owner.username}"
    assert created["agent_id"] == agent_id
    assert created["kind"] == "normal" and created["status"] == "inactive"
    assert created["skills"] == [{"id": "py", "name": "Python", "tags": ["code"]}]

    listed = ok(await owner.get("/v1/agents"))["agents"]
    assert {a["agent_id"] for a in listed} == {agent_id, owner.human}

    got = ok(await owner.get(f"/v1/agents/{agent_id}"))
    assert got["display_name"] == "Coder" and got["inbox_seq"] == 0

    patched = ok(await owner.patch(f"/v1/agents/{agent_id}",
                                   {"description": "reviews code", "skills": []}))
    assert patched["description"] == "reviews code" and patched["skills"] == []
    assert patched["display_name"] == "Coder"  # untouched fields stay

    resp = await owner.delete(f"/v1/agents/{agent_id}")
    assert resp.status_code == 204 and resp.content == b""
    problem(await owner.get(f"/v1/agents/{agent_id}"), 404, agent_id)
    problem(await owner.delete(f"/v1/agents/{agent_id}"), 404, agent_id)
    problem(await owner.patch(f"/v1/agents/{agent_id}", {"description": "x"}), 404, agent_id)


async def test_duplicate_and_reserved_agent_names(mesh):
    owner = await mesh.owner()
    ok(await owner.post("/v1/agents", {"name": "dup"}), 201)
    problem(await owner.post("/v1/agents", {"name": "dup"}), 409, "already have an agent")
    problem(await owner.post("/v1/agents", {"name": "human"}), 409, "reserved")
    # Another owner may use the same name: the agent_id differs.
    other = await mesh.owner()
    assert ok(await other.post("/v1/agents", {"name": "dup"}), 201)["agent_id"] == \
        f"dup@{other.username}"


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "Bad"}, "name"),
    ({"name": "with space"}, "name"),
    ({"name": "x" * 33}, "name"),
    ({"name": "ok", "skills": [{"name": "no id"}]}, "skills.0.id"),
    ({"name": "ok", "colour": "red"}, "colour"),
    ({}, "name"),
])
async def test_agent_create_validation(mesh, body, field):
    owner = await mesh.owner()
    data = problem(await owner.post("/v1/agents", body), 422, field)
    assert field in {e["field"] for e in data["errors"]}


async def test_virtual_user_cannot_be_deleted(mesh):
    owner = await mesh.owner()
    problem(await owner.delete(f"/v1/agents/{owner.human}"), 409, "virtual-user")
    assert ok(await owner.get(f"/v1/agents/{owner.human}"))["kind"] == "virtual-user"


async def test_another_owners_agent_is_404_on_owner_endpoints(mesh):
    alice, mallory = await mesh.owner(), await mesh.owner()
    a = await alice.agent("a")
    base = f"/v1/agents/{a.agent_id}"
    problem(await mallory.get(base), 404, a.agent_id)
    problem(await mallory.patch(base, {"description": "pwned"}), 404, a.agent_id)
    problem(await mallory.delete(base), 404, a.agent_id)
    problem(await mallory.post(f"{base}/keys"), 404, a.agent_id)
    problem(await mallory.get(f"{base}/keys"), 404, a.agent_id)
    problem(await mallory.delete(f"{base}/keys/{a.key_id}"), 404, a.agent_id)
    problem(await mallory.get(f"{base}/friends"), 404, a.agent_id)
    problem(await mallory.post(f"{base}/friends/requests", {"to_agent_id": mallory.human}),
            404, a.agent_id)
    problem(await mallory.get(f"/v1/agents/{alice.human}"), 404)
    assert a.agent_id not in {x["agent_id"] for x in ok(await mallory.get("/v1/agents"))["agents"]}
    # …and nothing happened to it: its token still works, its profile is unchanged.
    assert ok(await a.get("/v1/mesh/me"))["description"] == ""


# --- API keys and agent tokens --------------------------------------------------------

async def test_key_shown_once_and_only_hash_stored(mesh, db):
    owner = await mesh.owner()
    agent_id = ok(await owner.post("/v1/agents", {"name": "k"}), 201)["agent_id"]
    key = ok(await owner.post(f"/v1/agents/{agent_id}/keys"), 201)
    api_key, key_id = key["api_key"], key["key_id"]
    assert api_key.startswith(f"mk_{key_id}_") and len(api_key) > len(key_id) + 40

    row = await db.fetchrow("SELECT * FROM api_keys WHERE key_id = $1", key_id)
    assert row["key_hash"] == hashlib.sha256(api_key.encode()).hexdigest()
    assert api_key.split("_", 2)[2] not in " ".join(str(v) for v in row.values())

    listing = await owner.get(f"/v1/agents/{agent_id}/keys")
    assert ok(listing)["keys"][0]["key_id"] == key_id
    assert api_key.split("_", 2)[2] not in listing.text

    token = ok(await mesh.http.post("/v1/auth/token", json={"api_key": api_key}))
    assert token["agent_id"] == agent_id and token["token_type"] == "bearer"
    assert token["expires_in"] > 0
    listed = ok(await owner.get(f"/v1/agents/{agent_id}/keys"))["keys"][0]
    assert listed["last_used_at"] is not None and listed["revoked_at"] is None


@pytest.mark.parametrize("api_key", ["nonsense", "mk__x", "mk_kdeadbeef_wrongsecret"])
async def test_bad_api_key_is_401(mesh, api_key):
    problem(await mesh.http.post("/v1/auth/token", json={"api_key": api_key}), 401,
            "unknown or revoked")


async def test_wrong_secret_for_real_key_id_is_401(mesh):
    a, _ = await mesh.pair()
    forged = f"mk_{a.key_id}_{'A' * 43}"
    problem(await mesh.http.post("/v1/auth/token", json={"api_key": forged}), 401)


async def test_revoking_a_key_stops_tokens_already_issued(mesh):
    owner = await mesh.owner()
    a = await owner.agent("rev")
    spare = ok(await owner.post(f"/v1/agents/{a.agent_id}/keys"), 201)
    assert ok(await a.get("/v1/mesh/me"))["agent_id"] == a.agent_id

    resp = await owner.delete(f"/v1/agents/{a.agent_id}/keys/{a.key_id}")
    assert resp.status_code == 204
    problem(await a.get("/v1/mesh/me"), 401, "revoked")
    problem(await a.post("/v1/mesh/heartbeat"), 401, "revoked")
    problem(await mesh.http.post("/v1/auth/token", json={"api_key": a.api_key}), 401)
    # Revoking is idempotent; an unknown key id is 404.
    assert (await owner.delete(f"/v1/agents/{a.agent_id}/keys/{a.key_id}")).status_code == 204
    problem(await owner.delete(f"/v1/agents/{a.agent_id}/keys/knope"), 404, "knope")
    # The agent's other key is unaffected.
    b = AgentHandle(a.agent_id, spare["api_key"], spare["key_id"], mesh.http)
    await b.refresh_token()
    assert ok(await b.get("/v1/mesh/me"))["agent_id"] == a.agent_id
    keys = {k["key_id"]: k for k in ok(await owner.get(f"/v1/agents/{a.agent_id}/keys"))["keys"]}
    assert keys[a.key_id]["revoked_at"] is not None and keys[spare["key_id"]]["revoked_at"] is None


async def test_deleting_an_agent_stops_its_tokens(mesh):
    owner = await mesh.owner()
    a = await owner.agent("gone")
    assert (await owner.delete(f"/v1/agents/{a.agent_id}")).status_code == 204
    problem(await a.get("/v1/mesh/me"), 401)
    problem(await mesh.http.post("/v1/auth/token", json={"api_key": a.api_key}), 401)


async def test_recreated_agent_continues_the_seq(mesh, db):
    """An agent_id may be reused after its agent was deleted, its seqs may not:
    sends to the new agent must work (the old inbox rows used to collide with a
    counter restarted at 0 → 500), and its inbox starts empty at its cursor."""
    alice, bob = await mesh.owner(), await mesh.owner()
    b = await bob.agent("b")
    a = await alice.agent("a")
    await mesh.befriend(a, b)
    await b.send(a.agent_id, "to the first a")
    old_top = (await a.inbox())["events"][-1]["seq"]
    assert (await alice.delete(f"/v1/agents/{a.agent_id}")).status_code == 204

    a2 = await alice.agent("a")
    assert a2.agent_id == a.agent_id
    fresh = ok(await a2.get("/v1/mesh/me"))
    assert fresh["inbox_seq"] == fresh["acked_seq"] == old_top
    assert (await a2.inbox(after=old_top))["events"] == []
    assert ok(await a2.get("/v1/mesh/inbox"))["events"] == []  # default cursor: the acked one
    # The predecessor's events stay out of reach even when asked for explicitly.
    assert (await a2.inbox(after=0))["events"] == []
    async with httpx.AsyncClient(base_url=str(mesh.http.base_url), timeout=10) as client, \
            aconnect_sse(client, "GET", "/v1/mesh/inbox/stream",
                         headers={**a2.headers, "Last-Event-ID": "0"}) as source:
        await mesh.befriend(b, a2)
        async for sse in source.aiter_sse():
            if sse.data:
                first = json.loads(sse.data)
                break
    assert first["seq"] == old_top + 1 and first["type"] == "friend.request"
    task = await b.send(a2.agent_id, "to the second a")
    events = ok(await a2.get("/v1/mesh/inbox"))["events"]
    assert [e["type"] for e in events] == ["friend.request", "task.created"]
    assert [e["seq"] for e in events] == [old_top + 1, old_top + 2]
    assert events[-1]["task_id"] == task["task_id"]


# --- the owner acting as its virtual-user agent --------------------------------------

async def test_owner_token_acts_as_virtual_user(mesh):
    owner = await mesh.owner()
    a = await owner.agent("helper")
    who = ok(await owner.get("/v1/mesh/me"))
    assert who["agent_id"] == owner.human and who["kind"] == "virtual-user"
    # Implicit friends both ways, without any friend request.
    friends = ok(await owner.get("/v1/mesh/friends"))["friends"]
    assert {f["agent_id"]: f["implicit"] for f in friends} == {a.agent_id: True}
    mine = ok(await a.get("/v1/mesh/friends"))["friends"]
    assert {f["agent_id"]: f["implicit"] for f in mine} == {owner.human: True}
    # The human hands its own agent a task; the agent answers it.
    task = ok(await owner.post("/v1/mesh/tasks", {"to_agent_id": a.agent_id,
                                                  "message": text_message("please")}), 201)
    assert task["initiator"] == owner.human and task["serving_agent"] == a.agent_id
    assert (await a.inbox())["events"][-1]["from_agent_id"] == owner.human
    await a.reply(task["task_id"], "done")
    ev = ok(await owner.get("/v1/mesh/inbox"))["events"][-1]
    assert ev["type"] == "task.message" and ev["payload"]["message"]["sender"] == a.agent_id


# --- presence -----------------------------------------------------------------------

async def test_presence_cycle(mesh):
    a, _ = await mesh.pair()
    assert ok(await a.get("/v1/mesh/me"))["status"] == "inactive"
    beat = ok(await a.post("/v1/mesh/heartbeat"))
    assert beat["status"] == "active" and beat["last_heartbeat_at"]
    assert ok(await a.delete("/v1/mesh/online"))["status"] == "draining"
    # A heartbeat keeps a draining agent draining…
    assert ok(await a.post("/v1/mesh/heartbeat"))["status"] == "draining"
    assert ok(await a.get("/v1/mesh/me"))["status"] == "draining"
    # Its work finished, a clean stop leaves it offline, not "finishing" forever.
    assert ok(await a.post("/v1/mesh/offline"))["status"] == "inactive"
    assert ok(await a.get("/v1/mesh/me"))["status"] == "inactive"
    # …until it comes back explicitly.
    assert ok(await a.post("/v1/mesh/online"))["status"] == "active"
    assert ok(await a.post("/v1/mesh/heartbeat"))["status"] == "active"


async def test_me_shape(mesh):
    a, _ = await mesh.pair()
    body = ok(await a.get("/v1/mesh/me"))
    for field in ("agent_id", "name", "display_name", "description", "skills", "kind",
                  "status", "last_heartbeat_at", "inbox_seq", "acked_seq"):
        assert field in body, field
    assert body["name"] == "a" and body["kind"] == "normal"

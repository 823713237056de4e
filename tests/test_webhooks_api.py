"""Registering an agent's webhook: owner-scoped, validated, SSRF targets refused (ADR 035)."""

from __future__ import annotations

import pytest

from app.delivery.webhook_signing import SECRET_PREFIX
from tests.api_helpers import ok, problem

# A public address literal: registration checks it without a DNS lookup.
PUBLIC = "https://93.184.215.14/hooks/mesh"


async def put(owner, agent_id: str, body: object):
    return await owner.http.put(f"/v1/agents/{agent_id}/webhook", json=body,
                                headers=owner.headers)


async def test_put_get_rotate_delete(mesh, db):
    owner = await mesh.owner()
    agent = await owner.agent("hooked")
    created = ok(await put(owner, agent.agent_id, {"url": PUBLIC}))
    assert created["url"] == PUBLIC and created["status"] == "ok"
    assert created["secret"].startswith(SECRET_PREFIX)
    stored = await db.fetchval("SELECT secret FROM agent_webhooks WHERE agent_id = $1",
                               agent.agent_id)
    assert created["secret"] not in stored and created["secret"][len(SECRET_PREFIX):] not in stored

    shown = ok(await owner.get(f"/v1/agents/{agent.agent_id}/webhook"))
    assert shown == {"url": PUBLIC, "status": "ok", "last_error": None,
                     "last_success_at": None, "pending": 0}
    assert "secret" not in shown

    rotated = ok(await put(owner, agent.agent_id, {"url": PUBLIC + "/v2"}))
    assert rotated["secret"] != created["secret"] and rotated["url"] == PUBLIC + "/v2"
    grace = await db.fetchval("SELECT previous_secret_until > now() FROM agent_webhooks "
                              "WHERE agent_id = $1", agent.agent_id)
    assert grace is True

    assert (await owner.delete(f"/v1/agents/{agent.agent_id}/webhook")).status_code == 204
    problem(await owner.get(f"/v1/agents/{agent.agent_id}/webhook"), 404, "no webhook")
    problem(await owner.delete(f"/v1/agents/{agent.agent_id}/webhook"), 404, "no webhook")


async def test_another_owner_gets_404(mesh):
    alice, mallory = await mesh.owner(), await mesh.owner()
    agent = await alice.agent("mine")
    ok(await put(alice, agent.agent_id, {"url": PUBLIC}))
    attempts = [
        await put(mallory, agent.agent_id, {"url": PUBLIC + "/steal"}),
        await mallory.get(f"/v1/agents/{agent.agent_id}/webhook"),
        await mallory.delete(f"/v1/agents/{agent.agent_id}/webhook"),
        await put(mallory, "nobody@nowhere", {"url": PUBLIC}),
    ]
    for resp in attempts:
        problem(resp, 404, "owned by you")
    # The agent's own token is not an owner's.
    problem(await agent.http.put(f"/v1/agents/{agent.agent_id}/webhook", json={"url": PUBLIC},
                                 headers=agent.headers), 403, "owner token")
    assert ok(await alice.get(f"/v1/agents/{agent.agent_id}/webhook"))["url"] == PUBLIC


@pytest.mark.parametrize(("body", "fragment"), [
    ({}, "url"),
    ({"url": 5}, "url"),
    ({"url": ""}, "url"),
    ({"url": PUBLIC, "secret": "mine"}, "secret"),
    ({"url": "ftp://93.184.215.14/x"}, "scheme"),
    ({"url": "javascript:alert(1)"}, "scheme"),
    ({"url": "file:///etc/passwd"}, "scheme"),
    ({"url": "93.184.215.14/hook"}, "scheme"),
    ({"url": "https://"}, "no host"),
    ({"url": "https://user:pw@93.184.215.14/"}, "credentials"),
    ({"url": "https://93.184.215.14/#frag"}, "fragment"),
    ({"url": "https://93.184.215.14:99999/"}, "not a valid"),
    ({"url": "https://93.184.215.14/a b"}, "spaces"),
    ({"url": "https://93.184.215.14/" + "a" * 3000}, "characters"),
    ({"url": "https://no-such-host.invalid/"}, "does not resolve"),
])
async def test_validation(mesh, body, fragment):
    owner = await mesh.owner()
    agent = await owner.agent("v")
    problem(await put(owner, agent.agent_id, body), 422, fragment)


# What an attacker aims a webhook at to reach the mesh's own network.
SSRF = [
    "http://127.0.0.1:8080/", "http://127.1/", "http://localhost/", "http://[::1]/",
    "http://10.0.0.1/", "http://172.16.0.1/", "http://192.168.1.1/",
    "http://169.254.169.254/latest/meta-data/", "http://[fe80::1]/", "http://[fd00:ec2::254]/",
    "http://[::ffff:127.0.0.1]/", "http://[::ffff:169.254.169.254]/", "http://0.0.0.0/",
    "http://100.64.0.1/", "http://224.0.0.1/", "http://2130706433/", "http://0x7f.0.0.1/",
    "http://[64:ff9b::7f00:1]/", "http://[2002:a9fe:a9fe::]/", "https://240.0.0.1/",
]


async def test_private_targets_refused(mesh, db):
    """The session gateway runs with MESH_WEBHOOK_ALLOW_PRIVATE unset."""
    owner = await mesh.owner()
    agent = await owner.agent("ssrf")
    refused = 0
    for url in SSRF:
        problem(await put(owner, agent.agent_id, {"url": url}), 422, "refused")
        refused += 1
    assert refused == len(SSRF) == 20
    assert await db.fetchval("SELECT count(*) FROM agent_webhooks WHERE agent_id = $1",
                             agent.agent_id) == 0

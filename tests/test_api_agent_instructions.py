"""An agent's instructions (its system prompt for `mesh agent`): owner-set, agent-read, ≤ 8 KB."""

from __future__ import annotations


async def test_owner_sets_instructions_and_the_agent_reads_them(mesh):
    owner = await mesh.owner()
    agent = await owner.agent("helper", instructions="Answer in French.")
    me = (await agent.get("/v1/mesh/me")).json()
    assert me["instructions"] == "Answer in French."

    resp = await owner.patch(f"/v1/agents/{agent.agent_id}", {"instructions": "Answer in Dutch."})
    assert resp.status_code == 200, resp.text
    assert resp.json()["instructions"] == "Answer in Dutch."
    assert (await agent.get("/v1/mesh/me")).json()["instructions"] == "Answer in Dutch."

    resp = await owner.patch(f"/v1/agents/{agent.agent_id}", {"instructions": ""})
    assert resp.status_code == 200 and resp.json()["instructions"] == ""


async def test_instructions_over_8_kb_are_refused_and_stay_private(mesh):
    owner = await mesh.owner()
    agent = await owner.agent("helper")
    assert (await agent.get("/v1/mesh/me")).json()["instructions"] == ""
    resp = await owner.patch(f"/v1/agents/{agent.agent_id}", {"instructions": "é" * 4097})
    assert resp.status_code == 422 and "8192" in resp.text
    ok = await owner.patch(f"/v1/agents/{agent.agent_id}", {"instructions": "x" * 8192})
    assert ok.status_code == 200

    other = await (await mesh.owner()).agent("peer")
    await mesh.befriend(agent, other)
    card = (await other.get(f"/v1/mesh/agents/{agent.agent_id}/card")).json()
    assert "instructions" not in card  # a friend sees the card, never the system prompt

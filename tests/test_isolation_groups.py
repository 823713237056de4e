"""A group is joined, not imposed (ADR 030): a group owner who adds two other
owners' agents only invites them; until each accepts, neither reaches the other
through the group, sees its roster or hears its messages; any member may leave."""

from __future__ import annotations

import uuid

from tests.api_helpers import ok, problem, text_message
from tests.support.meshapi import AgentHandle, MeshFactory


def task_to(agent: AgentHandle) -> dict[str, object]:
    return {"to_agent_id": agent.agent_id, "message": text_message("hello through the group")}


async def test_a_group_owner_cannot_connect_two_other_owners_agents(mesh: MeshFactory) -> None:
    alice, bob, mallory = await mesh.owner(), await mesh.owner(), await mesh.owner()
    a, b, m = await alice.agent("a"), await bob.agent("b"), await mallory.agent("m")
    await mesh.befriend(m, a)
    await mesh.befriend(m, b)
    gid = f"g-{uuid.uuid4().hex[:10]}"
    ok(await mallory.post("/v1/groups", {"group_id": gid, "name": "Trap"}), 201)
    ok(await mallory.post(f"/v1/groups/{gid}/members", {"agent_id": m.agent_id}), 201)
    seq_a = ok(await a.get("/v1/mesh/me"))["inbox_seq"]
    for victim in (a, b):
        added = ok(await mallory.post(f"/v1/groups/{gid}/members",
                                      {"agent_id": victim.agent_id}), 201)
        assert added["status"] == "invited" and added["joined_at"] is None
    [invited] = (await a.inbox(after=seq_a))["events"]
    assert invited["type"] == "group.notice"
    assert invited["payload"] == {"group_id": gid, "name": "Trap", "notice": "invited",
                                  "role": "member"}

    # Before anyone accepts: no reach, no roster, no group message, no broadcast.
    attempts = [
        await a.post("/v1/mesh/tasks", task_to(b)),
        await b.post("/v1/mesh/tasks", task_to(a)),
    ]
    for resp in attempts:
        problem(resp, 403)
    reads = [await a.get(f"/v1/mesh/groups/{gid}/roster"),
             await b.get(f"/v1/mesh/groups/{gid}/roster")]
    for resp in reads:
        problem(resp, 404, gid)
    assert ok(await a.get("/v1/mesh/groups"))["groups"] == []
    posted = ok(await m.post(f"/v1/mesh/groups/{gid}/messages", text_message("psst")), 201)
    assert posted["recipients"] == 0
    problem(await m.post("/v1/mesh/broadcasts", {"group_id": gid, "message": text_message("?"),
                                                 "timeout_seconds": 60}), 422, "no other")
    assert [e["type"] for e in (await a.inbox(after=seq_a))["events"]] == ["group.notice"]
    assert [g["member_count"] for g in ok(await mallory.get("/v1/groups"))["groups"]] == [1]

    # Nobody answers for someone else: mallory's agent and mallory herself.
    forged = [await m.post(f"/v1/mesh/groups/invitations/{gid}/accept"),
              await mallory.post(f"/v1/agents/{a.agent_id}/groups/invitations/{gid}/accept"),
              await mallory.post(f"/v1/agents/{b.agent_id}/groups/invitations/{gid}/accept")]
    for resp in forged:
        assert resp.status_code == 404, resp.text
    assert len(attempts) + len(reads) + len(forged) == 7

    # a accepts itself, bob accepts for b from his owner account: now they share it.
    listed = ok(await a.get("/v1/mesh/groups/invitations"))["invitations"]
    assert [(i["group_id"], i["name"], i["role"]) for i in listed] == [(gid, "Trap", "member")]
    joined = ok(await a.post(f"/v1/mesh/groups/invitations/{gid}/accept"))
    assert joined["status"] == "member" and joined["joined_at"]
    problem(await a.post("/v1/mesh/tasks", task_to(b)), 403)  # b has not accepted yet
    ok(await bob.post(f"/v1/agents/{b.agent_id}/groups/invitations/{gid}/accept"))
    ok(await a.post("/v1/mesh/tasks", task_to(b)), 201)
    roster = ok(await a.get(f"/v1/mesh/groups/{gid}/roster"))["members"]
    assert {r["agent_id"] for r in roster} == {a.agent_id, b.agent_id, m.agent_id}

    # Any member may leave, from its own key or its owner's account.
    assert (await b.delete(f"/v1/mesh/groups/{gid}/members/me")).status_code == 204
    problem(await a.post("/v1/mesh/tasks", task_to(b)), 403)
    problem(await b.delete(f"/v1/mesh/groups/{gid}/members/me"), 404, gid)
    assert (await alice.delete(f"/v1/agents/{a.agent_id}/groups/{gid}")).status_code == 204
    assert ok(await a.get("/v1/mesh/groups"))["groups"] == []


async def test_rejecting_and_withdrawing_an_invitation(mesh: MeshFactory) -> None:
    alice, bob = await mesh.owner(), await mesh.owner()
    a, b = await alice.agent("a"), await bob.agent("b")
    await mesh.befriend(a, b)
    gid = f"g-{uuid.uuid4().hex[:10]}"
    ok(await alice.post("/v1/groups", {"group_id": gid, "name": "Crew"}), 201)
    ok(await alice.post(f"/v1/groups/{gid}/members", {"agent_id": b.agent_id}), 201)
    again = ok(await alice.post(f"/v1/groups/{gid}/members",
                                {"agent_id": b.agent_id, "role": "admin"}), 200)
    assert again == {**again, "status": "invited", "role": "admin"}
    rejected = ok(await b.post(f"/v1/mesh/groups/invitations/{gid}/reject"))
    assert rejected["status"] == "rejected" and rejected["role"] == "admin"
    problem(await b.post(f"/v1/mesh/groups/invitations/{gid}/accept"), 404, gid)
    # Asked again, then withdrawn by the group's owner before an answer.
    ok(await alice.post(f"/v1/groups/{gid}/members", {"agent_id": b.agent_id}), 201)
    assert (await alice.delete(f"/v1/groups/{gid}/members/{b.agent_id}")).status_code == 204
    assert ok(await b.get("/v1/mesh/groups/invitations"))["invitations"] == []
    assert ok(await alice.get(f"/v1/groups/{gid}"))["members"] == []

"""Context timelines for agents: the whole context in order —
tasks, messages, state changes, artifacts — paged; participants and members of
the context's group only, everyone else a 404. The owner's timeline reads the
same entries."""

from __future__ import annotations

import uuid
from typing import Any

from tests.api_helpers import move, ok, problem, text_message
from tests.support.meshapi import AgentHandle, MeshFactory


def summary(entries: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for e in entries:
        detail = {"task": lambda e: e["task"]["serving_agent"],
                  "message": lambda e: e["message"]["parts"][0]["text"],
                  "state": lambda e: e["state"]["to_state"],
                  "artifact": lambda e: e["artifact"]["name"]}[e["kind"]](e)
        out.append((e["kind"], detail))
    return out


async def read_all(agent: AgentHandle, context: str, limit: int) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        page = ok(await agent.get(f"/v1/mesh/contexts/{context}/timeline", params=params))
        entries += page["entries"]
        if not (cursor := page["next_cursor"]):
            return entries


async def test_participants_see_the_whole_context_in_order(mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    c = await (await mesh.owner()).agent("c")
    await mesh.befriend(b, c)
    context = f"ctx-{uuid.uuid4().hex[:8]}"
    first = await a.send(b.agent_id, "question", context_id=context)
    ok(await move(b, first["task_id"], "working"))
    ok(await b.post(f"/v1/mesh/tasks/{first['task_id']}/artifacts",
                    {"name": "draft", "parts": [{"kind": "text", "text": "..."}]}), 201)
    ok(await move(b, first["task_id"], "completed", message=text_message("answer")))
    # b asks c in the same context: a takes no part in that task, but sees it.
    second = await b.send(c.agent_id, "sub-question", context_id=context)
    await c.reply(second["task_id"], "sub-answer")
    expected = [("task", b.agent_id), ("message", "question"), ("state", "working"),
                ("artifact", "draft"), ("message", "answer"), ("state", "completed"),
                ("task", c.agent_id), ("message", "sub-question"), ("message", "sub-answer")]
    for reader in (a, b, c):
        assert summary(await read_all(reader, context, limit=200)) == expected
    paged = await read_all(a, context, limit=2)
    assert summary(paged) == expected
    assert paged[5]["state"]["set_by"] == b.agent_id
    assert paged[5]["state"]["from_state"] == "working"
    assert [e["at"] for e in paged] == sorted(e["at"] for e in paged)

    outsider = await (await mesh.owner()).agent("outsider")
    problem(await outsider.get(f"/v1/mesh/contexts/{context}/timeline"), 404, context)
    problem(await a.get("/v1/mesh/contexts/ctx-never-was/timeline"), 404)
    problem(await a.get(f"/v1/mesh/contexts/{context}/timeline", params={"cursor": "@@"}), 400,
            "cursor")
    problem(await a.get("/v1/mesh/contexts/%20bad/timeline"), 422)


async def test_group_members_read_a_group_broadcasts_context(mesh: MeshFactory) -> None:
    owner = await mesh.owner()
    lead, a = await owner.agent("lead"), await owner.agent("a")
    gid = f"g-{uuid.uuid4().hex[:8]}"
    ok(await owner.post("/v1/groups", {"group_id": gid, "name": "T"}), 201)
    for m in (lead, a):
        ok(await owner.post(f"/v1/groups/{gid}/members", {"agent_id": m.agent_id}), 201)
    out = ok(await lead.post("/v1/mesh/broadcasts", {
        "group_id": gid, "message": text_message("ideas?"), "timeout_seconds": 60}), 201)
    late = await owner.agent("late")  # joins afterwards: a member, not a participant
    problem(await late.get(f"/v1/mesh/contexts/{out['context_id']}/timeline"), 404)
    ok(await owner.post(f"/v1/groups/{gid}/members", {"agent_id": late.agent_id}), 201)
    entries = await read_all(late, out["context_id"], limit=50)
    assert summary(entries) == [("task", a.agent_id), ("message", "ideas?")]


async def test_owner_timeline_has_the_same_entries(mesh: MeshFactory) -> None:
    alice, bob = await mesh.owner(), await mesh.owner()
    a, b = await alice.agent("a"), await bob.agent("b")
    await mesh.befriend(a, b)
    context = f"ctx-{uuid.uuid4().hex[:8]}"
    task = await a.send(b.agent_id, "hi", context_id=context)
    ok(await move(b, task["task_id"], "rejected"))
    owner_view = ok(await alice.get(f"/v1/contexts/{context}/timeline"))
    assert owner_view["entries"] == await read_all(a, context, limit=10)
    assert [m["parts"][0]["text"] for m in owner_view["messages"]] == ["hi"]

"""Client-chosen ids cannot be used to probe or squat another
tenant's; idempotency stays exact (ADR 019)."""

from __future__ import annotations

import uuid

from tests.api_helpers import ok, problem, text_message
from tests.support.meshapi import MeshFactory


async def test_another_tenants_message_id_is_neither_probed_nor_squatted(
        mesh: MeshFactory, db) -> None:
    a, b = await mesh.pair()
    c = await (await mesh.owner()).agent("c")
    await mesh.befriend(c, b)
    mid = f"m-{uuid.uuid4().hex}"
    # c squats the id first, with other content…
    squat = ok(await c.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id,
                                               "message": text_message("squat", message_id=mid)}),
               201)
    # …and a's own send with that id still goes through, as a's message.
    body = {"to_agent_id": b.agent_id, "message": text_message("mine", message_id=mid)}
    mine = ok(await a.post("/v1/mesh/tasks", body), 201)
    assert mine["task_id"] != squat["task_id"]
    # Retries stay exact per sender: same content → the stored record, other → 409.
    assert ok(await a.post("/v1/mesh/tasks", body), 200) == mine
    problem(await a.post("/v1/mesh/tasks", {**body, "message": text_message(
        "changed", message_id=mid)}), 409, mid)
    # Replies in one task: the id is the sender's, so b may use the same one.
    reply = ok(await b.post(f"/v1/mesh/tasks/{mine['task_id']}/messages",
                            text_message("re", message_id=mid)), 201)
    assert reply["message_id"] == mid
    rows = await db.fetch("SELECT sender FROM task_messages WHERE message_id = $1", mid)
    assert sorted(r["sender"] for r in rows) == sorted([a.agent_id, b.agent_id, c.agent_id])
    # Receipts still follow each message to its recipient.
    got = ok(await a.get(f"/v1/mesh/tasks/{mine['task_id']}"))
    assert all(m["seq"] is not None for m in got["messages"]), got


async def test_a_taken_task_id_gets_one_answer_whoever_holds_it(mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    c = await (await mesh.owner()).agent("c")
    await mesh.befriend(c, b)
    tid = f"task-{uuid.uuid4().hex}"
    ok(await a.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id, "task_id": tid,
                                       "message": text_message("a's")}), 201)
    foreign = problem(await c.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id, "task_id": tid,
                                                      "message": text_message("c's")}), 409,
                      "not available")
    own = problem(await a.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id, "task_id": tid,
                                                  "message": text_message("again")}), 409)
    assert foreign == own
    assert a.agent_id not in str(foreign) and "taken" not in foreign["detail"]

"""Two ``mesh agent`` processes on the real gateway: a person asks alice, alice delegates to bob.

alice's model delegates with mesh_send_message (same context); bob's model answers
with mesh_reply and completes his task; alice's model, woken by bob's answer,
resumes the context's session (it remembers the person's task) and replies to the
person. Every message and state is counted: nothing lost, nothing doubled.
"""

from __future__ import annotations

from tests.meshd.agent_support import (
    agent_proc,
    ask,
    closing,
    first_task_in_history,
    runs,
    started,
    task_in_prompt,
    task_of,
    texts_by,
    wait_runs,
)
from tests.support.model_server import ModelServer, Reply, Request, use_tool


async def test_person_asks_alice_alice_delegates_to_bob_and_answers(world, uniq, gateway, tmp_path):
    alice = await world.alice.agent(f"alice{uniq}", description="front desk")
    bob = await world.bob.agent(
        f"bob{uniq}", description="does arithmetic",
        skills=[{"id": "math", "name": "arithmetic"}],
    )  # fmt: skip
    await world.factory.befriend(alice, bob)

    def alice_script(req: Request) -> Reply:
        if "New task from" in req.prompt:  # the person's question
            if req.called("mcp__mesh__mesh_send_message") == 0:
                return use_tool(req, "mesh_send_message", {"to_agent_id": bob.agent_id, "text": "6*7?"})
            return Reply(text="Asked bob; waiting for his answer.")
        # bob's answer, on the task alice opened: answer the person on the first task
        person_task = first_task_in_history(req)
        if req.called("mcp__mesh__mesh_reply") == 0:
            return use_tool(req, "mesh_reply", {"task_id": person_task, "text": "Bob says: 42"})
        if req.called("mcp__mesh__mesh_set_task_status") == 0:
            return use_tool(req, "mesh_set_task_status", {"task_id": person_task, "state": "completed"})
        return Reply(text="Answered the person.")

    def bob_script(req: Request) -> Reply:
        task_id = task_in_prompt(req)
        if req.called("mcp__mesh__mesh_reply") == 0:
            return use_tool(req, "mesh_reply", {"task_id": task_id, "text": "42"})
        if req.called("mcp__mesh__mesh_set_task_status") == 0:
            return use_tool(req, "mesh_set_task_status", {"task_id": task_id, "state": "completed"})
        return Reply(text="Done.")

    with ModelServer(alice_script) as a_model, ModelServer(bob_script) as b_model:
        a = agent_proc(gateway, alice, tmp_path, "alice", a_model)
        b = agent_proc(gateway, bob, tmp_path, "bob", b_model)
        try:
            await started(a)
            await started(b)
            asked = await ask(world.alice, alice.agent_id, "What is six times seven?")
            await wait_runs(b, 1)
            await wait_runs(a, 2)  # the delegation, then the answer
        finally:
            await a.stop()
            await b.stop()
        bob_first = b_model.agent_turns()[0]
        alice_turns = a_model.agent_turns()

    person = await task_of(world.alice, asked["task_id"])
    assert person["state"] == "completed"
    assert texts_by(person, world.alice.human) == ["What is six times seven?"]
    assert texts_by(person, alice.agent_id) == ["Bob says: 42"]
    assert len([m for m in person["messages"] if not closing(m)]) == 2  # and the runtime's closing notes

    listed = await alice.get("/v1/mesh/tasks", params={"context_id": asked["context_id"]})
    assert listed.status_code == 200, listed.text
    tasks = listed.json()["tasks"]
    delegated = [t for t in tasks if t["task_id"] != asked["task_id"]]
    assert len(delegated) == 1  # one delegation, in the person's context
    d = await task_of(alice, delegated[0]["task_id"])
    assert d["state"] == "completed" and d["serving_agent"] == bob.agent_id
    assert texts_by(d, alice.agent_id) == ["6*7?"]
    assert texts_by(d, bob.agent_id) == ["42"]

    # bob's model knew who alice is from its teammates summary; alice's answer run remembered the
    # person's question (the context's session was resumed)
    assert alice.agent_id in bob_first.system and "front desk" in bob_first.system
    assert "What is six times seven?" in alice_turns[-1].all_text
    assert [r["outcome"] for r in runs(tmp_path, "alice")] == ["ok", "ok"]
    assert [r["event_type"] for r in runs(tmp_path, "alice")] == ["task.created", "task.message"]
    assert [r["event_type"] for r in runs(tmp_path, "bob")] == ["task.created"]

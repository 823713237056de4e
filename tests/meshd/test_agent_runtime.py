"""``mesh agent`` end to end: a real agent process, the real SDK and bundled CLI, the real gateway.

Only the model API is a stand-in (tests/support/model_server.py), scripted per test.
Every wait is on an event (a log line of the agent, a request reaching the model).
"""

from __future__ import annotations

import signal

from tests.meshd.agent_support import (
    DONE,
    agent_proc,
    ask,
    runs,
    say,
    started,
    task_in_prompt,
    task_of,
    texts_by,
)
from tests.support.model_server import ModelServer, Reply, Request, use_tool


async def test_one_event_one_run_reply_through_the_mesh_tool(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"r{uniq}")

    def script(req: Request) -> Reply:
        if req.called("mcp__mesh__mesh_reply") == 0:
            return use_tool(req, "mesh_reply", {"task_id": task_in_prompt(req), "text": "It is 42."})
        if req.called("mcp__mesh__mesh_set_task_status") == 0:
            done = {"task_id": task_in_prompt(req), "state": "completed"}
            return use_tool(req, "mesh_set_task_status", done)
        return Reply(text="Answered and closed.")

    with ModelServer(script) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model)
        try:
            await started(proc)
            task = await ask(world.alice, agent.agent_id, "What is six times seven?")
            await proc.wait_log(DONE)
        finally:
            await proc.stop()
        first = model.agent_turns()[0]

    got = await task_of(world.alice, task["task_id"])
    assert texts_by(got, agent.agent_id) == ["It is 42."]  # once; the final text is not auto-posted
    assert got["state"] == "completed"
    reply = next(m for m in got["messages"] if m["sender"] == agent.agent_id)
    assert reply["metadata"]["mesh_run"]["event_id"]
    # What the model was shown: the event rendered, the mesh tools, no inbox tool, no shell.
    assert "What is six times seven?" in first.prompt
    assert f"task_id: {task['task_id']}" in first.prompt
    assert world.alice.human in first.prompt
    assert agent.agent_id in first.system
    names = set(first.tool_names)
    assert "mcp__mesh__mesh_check_inbox" not in names
    assert "Bash" not in names
    assert {"mcp__mesh__mesh_reply", "mcp__mesh__mesh_send_message"} <= names or "ToolSearch" in names
    [rec] = runs(tmp_path, "a")
    assert rec["outcome"] == "ok" and rec["turns"] == 3 and rec["posted"] == 1
    assert rec["cost_usd"] > 0


async def test_final_text_is_the_reply_when_the_run_posted_nothing(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"r{uniq}")
    quiet = await world.alice.agent(f"q{uniq}")
    with ModelServer(lambda req: Reply(text="Six times seven is 42.")) as model:
        talk = agent_proc(gateway, agent, tmp_path, "a", model)
        mute = agent_proc(gateway, quiet, tmp_path, "q", model, "--no-auto-reply")
        try:
            await started(talk)
            await started(mute)
            t1 = await ask(world.alice, agent.agent_id, "6*7?")
            t2 = await ask(world.alice, quiet.agent_id, "6*7?")
            await talk.wait_log(DONE)
            await mute.wait_log(DONE)
        finally:
            await talk.stop()
            await mute.stop()
    got = await task_of(world.alice, t1["task_id"])
    assert texts_by(got, agent.agent_id) == ["Six times seven is 42."]
    meta = next(m for m in got["messages"] if m["sender"] == agent.agent_id)["metadata"]["mesh_run"]
    assert meta["auto_reply"] is True and meta["outcome"] == "ok" and meta["turns"] == 1
    assert meta["cost_usd"] > 0 and "duration_ms" in meta
    assert texts_by(await task_of(world.alice, t2["task_id"]), quiet.agent_id) == []


async def test_events_that_need_no_thought_start_no_run_and_friends_refresh_the_team(world, uniq, gateway,
                                                                                      tmp_path):
    agent = await world.alice.agent(f"r{uniq}")
    other = await world.bob.agent(f"o{uniq}", description="knows geography")
    with ModelServer(lambda req: Reply(text="hello")) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--no-auto-complete")
        try:
            await started(proc)
            task = await ask(world.alice, agent.agent_id, "hi")
            await proc.wait_log(DONE)
            # A friendship (friend.request / friend.accepted) and a status change are no work...
            await world.factory.befriend(other, agent)
            resp = await world.alice.post(f"/v1/mesh/tasks/{task['task_id']}/status", {"state": "canceled"})
            assert resp.status_code == 200, resp.text
            # ...the next task's run proves the daemon went past them without a run
            n = len(proc.lines)
            await ask(world.alice, agent.agent_id, "again")
            await proc.wait_log(DONE, after=n)
        finally:
            await proc.stop()
        first, second = model.agent_turns()
    assert [r["event_type"] for r in runs(tmp_path, "a")] == ["task.created", "task.created"]
    # the friendship event refreshed the teammates summary at once (not after its 5 min TTL)
    assert other.agent_id not in first.system
    assert other.agent_id in second.system and "knows geography" in second.system


async def test_session_continues_per_context_and_across_restarts(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"r{uniq}")
    with ModelServer(lambda req: Reply(text=f"noted ({len(req.messages)} messages)")) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--no-auto-complete")
        try:
            await started(proc)
            task = await ask(world.alice, agent.agent_id, "Remember the word PELICAN.")
            await proc.wait_log(DONE)
            n = len(proc.lines)
            await say(world.alice, task["task_id"], "Which word did I ask you to remember?")
            await proc.wait_log(DONE, after=n)
            second = model.agent_turns()[-1]
            assert "PELICAN" in second.all_text and "Which word" in second.prompt

            # Another context starts fresh.
            n = len(proc.lines)
            await ask(world.alice, agent.agent_id, "A new topic.")
            await proc.wait_log(DONE, after=n)
            assert "PELICAN" not in model.agent_turns()[-1].all_text

            proc.signal(signal.SIGTERM)
            assert await proc.wait() == 0
            proc = agent_proc(gateway, agent, tmp_path, "a", model, "--no-auto-complete")
            await started(proc)
            await say(world.alice, task["task_id"], "And after a restart?")
            await proc.wait_log(DONE)
            third = model.agent_turns()[-1]
        finally:
            await proc.stop()
    assert "PELICAN" in third.all_text and "Which word" in third.all_text
    assert "And after a restart?" in third.prompt
    assert "A new topic" not in third.all_text


async def test_the_owners_instructions_reach_the_system_prompt_and_changes_apply(world, uniq, gateway,
                                                                                 tmp_path):
    agent = await world.alice.agent(f"r{uniq}", instructions="Always answer in French.")
    with ModelServer(lambda req: Reply(text="Oui.")) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model)
        try:
            await started(proc)
            await ask(world.alice, agent.agent_id, "Hello?")
            await proc.wait_log(DONE)
            resp = await world.alice.patch(f"/v1/agents/{agent.agent_id}",
                                           {"instructions": "Always answer in Dutch."})  # fmt: skip
            assert resp.status_code == 200, resp.text
            n = len(proc.lines)
            await ask(world.alice, agent.agent_id, "Hello again?")
            await proc.wait_log(DONE, after=n)
        finally:
            await proc.stop()
        first, second = model.agent_turns()
    assert "Always answer in French." in first.system
    assert "Always answer in Dutch." in second.system and "French" not in second.system
    assert world.alice.human in first.system  # the teammates summary: the owner is a friend

"""After a run: the task it answered is completed, and the owner sees what the run cost.

Real ``mesh agent`` processes (SDK and bundled CLI), the real gateway and console;
the model is the scripted stand-in, whose usage figures are what the CLI prices.
"""

from __future__ import annotations

import re

from tests.meshd.agent_support import (
    DONE,
    agent_proc,
    ask,
    closing,
    console_get,
    runs,
    started,
    task_in_prompt,
    task_of,
    texts_by,
)
from tests.meshd.support import gateway_runs
from tests.support.model_server import ModelServer, Reply, Request, use_tool


def _closing_note(task: dict, sender: str) -> dict:  # type: ignore[type-arg]
    [note] = [m for m in task["messages"] if m["sender"] == sender and closing(m)]
    return note  # type: ignore[no-any-return]


async def test_an_auto_reply_completes_the_task(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"c{uniq}")
    with ModelServer(lambda req: Reply(text="It is 42.")) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model)
        try:
            await started(proc)
            task = await ask(world.alice, agent.agent_id, "6*7?")
            await proc.wait_log(DONE)
            [reported] = await gateway_runs(world.alice, agent.agent_id, settled=1)
        finally:
            await proc.stop()
    got = await task_of(world.alice, task["task_id"])
    assert got["state"] == "completed"  # not left `submitted` for the 24 h timeout to fail
    assert texts_by(got, agent.agent_id) == ["It is 42."]
    [rec] = runs(tmp_path, "a")
    figures = _closing_note(got, agent.agent_id)["metadata"]["mesh_run"]
    assert figures["final"] is True and figures["turns"] == rec["turns"]
    assert figures["cost_usd"] == rec["cost_usd"] > 0
    # The gateway has the run, reported at its start and end, with the same figures.
    assert (reported["run_id"], reported["outcome"]) == (figures["run_id"], "ok")
    assert (reported["turns"], reported["cost_usd"]) == (rec["turns"], rec["cost_usd"])
    assert reported["task_id"] == task["task_id"] and reported["ended_at"] is not None
    assert (await task_of(world.alice, task["task_id"]))["usage"]["cost_usd"] == rec["cost_usd"]


async def test_a_mesh_reply_completes_the_task_and_the_console_shows_the_runs_cost(world, uniq, gateway,
                                                                                    tmp_path):
    agent = await world.alice.agent(f"c{uniq}")

    def script(req: Request) -> Reply:
        if req.called("mcp__mesh__mesh_reply") == 0:
            step = use_tool(req, "mesh_reply", {"task_id": task_in_prompt(req), "text": "It is 42."})
        else:
            step = Reply(text="Answered.")
        step.input_tokens, step.output_tokens = 20_000, 3_000  # a run worth cents, not $0.0000
        return step

    with ModelServer(script) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model)
        try:
            await started(proc)
            task = await ask(world.alice, agent.agent_id, "What is six times seven?")
            await proc.wait_log(DONE)
            await gateway_runs(world.alice, agent.agent_id, settled=1)  # its end report is in
        finally:
            await proc.stop()
    got = await task_of(world.alice, task["task_id"])
    assert got["state"] == "completed"
    assert texts_by(got, agent.agent_id) == ["It is 42."]  # the final text is not auto-posted
    [rec] = runs(tmp_path, "a")  # the SDK's ResultMessage figures, as the runtime recorded them
    assert rec["cost_usd"] > 0.01 and rec["turns"] >= 2
    reply = next(m for m in got["messages"] if m["sender"] == agent.agent_id and not closing(m))
    assert reply["metadata"]["mesh_run"]["run_id"] == _closing_note(got, agent.agent_id)["metadata"][
        "mesh_run"]["run_id"]

    page = await console_get(world.alice, f"/console/tasks/{task['task_id']}")
    cost, turns = f"${rec['cost_usd']:.4f}", rec["turns"]
    # the task's total: one run, its real figures (was "$0.0000 · 0 turns")
    assert f"Run cost</dt><dd>{cost} · {turns} turns · 1 run(s)" in page, page
    # and on the model's own reply, posted mid-run (was a blank "Run:  · $ · turns")
    summaries = re.findall(r"<summary>Run: ([^<]*)</summary>", page)
    assert summaries and all(s == f"ok · {cost} · {turns} turns" for s in summaries), summaries


async def test_a_state_the_model_set_is_left_as_it_set_it(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"c{uniq}")

    def script(req: Request) -> Reply:
        want = "input-required" if "Ask me" in req.prompt else "failed"
        if req.called("mcp__mesh__mesh_set_task_status") == 0:
            return use_tool(req, "mesh_set_task_status", {"task_id": task_in_prompt(req), "state": want,
                                                          "message": f"note: {want}"})
        return Reply(text="Over to you.")

    with ModelServer(script) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model)
        try:
            await started(proc)
            asking = await ask(world.alice, agent.agent_id, "Ask me a question.")
            await proc.wait_log(DONE)
            n = len(proc.lines)
            failing = await ask(world.alice, agent.agent_id, "Give up.")
            await proc.wait_log(DONE, after=n)
        finally:
            await proc.stop()
    for task, state in ((asking, "input-required"), (failing, "failed")):
        got = await task_of(world.alice, task["task_id"])
        assert got["state"] == state
        # the model's note, carrying the run's final figures; no auto-reply beside it
        assert texts_by(got, agent.agent_id) == [f"note: {state}"]
        note = next(m for m in got["messages"] if m["sender"] == agent.agent_id)
        assert note["metadata"]["mesh_run"]["final"] is True and note["metadata"]["mesh_run"]["cost_usd"] > 0


async def test_no_auto_complete_leaves_the_task_open(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"c{uniq}")
    with ModelServer(lambda req: Reply(text="It is 42.")) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--no-auto-complete")
        try:
            await started(proc)
            task = await ask(world.alice, agent.agent_id, "6*7?")
            await proc.wait_log(DONE)
        finally:
            await proc.stop()
    got = await task_of(world.alice, task["task_id"])
    assert got["state"] == "submitted"
    assert texts_by(got, agent.agent_id) == ["It is 42."]
    assert not any(closing(m) for m in got["messages"])

"""``mesh agent`` limits, crashes and permissions, against the real SDK and CLI.

A limit (turns, budget, time) ends the run for good: one run, a note naming the
limit and the spend, the task ``failed``; the next event runs normally. A kill -9
mid-run re-runs the event after a restart, and the reply still appears once.
"""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest

from meshd.daemon.run_reports import INTERRUPTED
from tests.meshd.agent_support import (
    DONE,
    agent_proc,
    ask,
    killed_mid_run_and_restarted,
    runs,
    say,
    started,
    task_in_prompt,
    task_of,
    texts_by,
)
from tests.meshd.support import gateway_runs, process_exit
from tests.support.model_server import ApiError, ModelServer, Reply, Request, use_tool


def replying(text: str, then: Reply | None = None):
    def script(req: Request) -> Reply:
        if req.called("mcp__mesh__mesh_reply") == 0:
            return use_tool(req, "mesh_reply", {"task_id": task_in_prompt(req), "text": text})
        return then or Reply(text="done")

    return script


async def test_turn_and_budget_limits_fail_the_task_once_then_the_next_event_runs(world, uniq, gateway,
                                                                                   tmp_path):
    agent = await world.alice.agent(f"r{uniq}")
    mode = {"now": "loop"}

    def script(req: Request) -> Reply:
        if mode["now"] == "loop":  # a model that never stops calling tools
            return use_tool(req, "mesh_get_task", {"task_id": task_in_prompt(req)})
        if mode["now"] == "expensive":  # 2M input tokens a turn: far past $0.50
            reply = use_tool(req, "mesh_get_task", {"task_id": task_in_prompt(req)})
            reply.input_tokens = 2_000_000
            return reply
        return replying("fine now")(req)

    with ModelServer(script) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--max-turns", "3", "--max-budget-usd", "0.5")
        try:
            await started(proc)
            looping = await ask(world.alice, agent.agent_id, "Loop forever")
            await proc.wait_log(DONE)
            turns_after_loop = len(model.agent_turns())

            mode["now"] = "expensive"
            n = len(proc.lines)
            costly = await ask(world.alice, agent.agent_id, "Spend a lot")
            await proc.wait_log(DONE, after=n)

            mode["now"] = "normal"
            n = len(proc.lines)
            normal = await ask(world.alice, agent.agent_id, "Now something simple")
            await proc.wait_log(DONE, after=n)
        finally:
            await proc.stop()

    assert turns_after_loop == 3  # the CLI stopped the loop at --max-turns; no retry
    got = await task_of(world.alice, looping["task_id"])
    assert got["state"] == "failed"
    note = got["status_message"]["parts"][0]
    assert "turn limit (--max-turns 3)" in note["text"] and "not retried" in note["text"]
    assert note["metadata"]["mesh_run"]["outcome"] == "error_max_turns"

    got = await task_of(world.alice, costly["task_id"])
    assert got["state"] == "failed"
    note = got["status_message"]["parts"][0]
    assert "budget limit (--max-budget-usd 0.5)" in note["text"]
    assert note["metadata"]["mesh_run"]["cost_usd"] > 0.5

    assert texts_by(await task_of(world.alice, normal["task_id"]), agent.agent_id) == ["fine now"]
    outcomes = [r["outcome"] for r in runs(tmp_path, "a")]
    assert outcomes == ["error_max_turns", "error_max_budget_usd", "ok"]  # one run per event
    assert proc.count(r"run for seq \d+ .*starting") == 3


@pytest.mark.slow  # lets a run hit its wall-clock --timeout on purpose
async def test_wall_clock_timeout_fails_the_task(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"r{uniq}")
    release = threading.Event()

    def script(req: Request) -> Reply:
        release.wait(30)  # the model "thinks" past the agent's --timeout
        return Reply(text="too late")

    with ModelServer(script) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--timeout", "3")
        try:
            await started(proc)
            task = await ask(world.alice, agent.agent_id, "Think hard")
            await proc.wait_log(DONE)
        finally:
            release.set()
            await proc.stop()
    got = await task_of(world.alice, task["task_id"])
    assert got["state"] == "failed"
    assert "time limit (--timeout 3 s)" in got["status_message"]["parts"][0]["text"]
    assert [r["outcome"] for r in runs(tmp_path, "a")] == ["timeout"]
    [only] = texts_by(got, agent.agent_id)  # the note; the late answer never arrives
    assert only.startswith("Stopped:")


async def test_kill_9_mid_run_reruns_the_event_and_the_reply_appears_once(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"r{uniq}")
    hold = threading.Event()
    first_try = {"on": True}

    def script(req: Request) -> Reply:
        if "Crash here" not in req.prompt:  # the context's first event: a plain answer
            return Reply(text="first answer")
        if req.called("mcp__mesh__mesh_reply") == 0:
            return use_tool(req, "mesh_reply", {"task_id": task_in_prompt(req), "text": "the answer"})
        if first_try["on"]:
            hold.wait(30)  # the reply is posted; the run is still going when the agent dies
        return Reply(text="done")

    with ModelServer(script) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--no-auto-complete")  # more follows
        try:
            await started(proc)
            task = await ask(world.alice, agent.agent_id, "Remember ORCA.")
            await proc.wait_log(DONE)
            await say(world.alice, task["task_id"], "Crash here: answer, then die.")
            await model.wait_turns(3)  # 1 for the first event; the reply went out; the next turn hangs
            proc, before = await killed_mid_run_and_restarted(proc, gateway, agent, tmp_path,
                                                              model, first_try, hold)
            # Read while it runs: the end report follows the run's log line.
            at_gateway = await gateway_runs(world.alice, agent.agent_id, settled=3)
        finally:
            hold.set()
            await proc.stop()

    rerun = model.agent_turns()[before:]
    assert any(b["name"] == "mcp__mesh__mesh_reply" for r in rerun for b in r.tool_uses())  # it ran again
    got = await task_of(world.alice, task["task_id"])
    assert texts_by(got, agent.agent_id) == ["first answer", "the answer"]  # and posted once
    assert [r["outcome"] for r in runs(tmp_path, "a")] == ["ok", "ok"]
    # The gateway counts three runs: the kill cut one short, and the restarted
    # runtime reported it failed before the event ran again.
    assert [r["outcome"] for r in at_gateway] == ["ok", "failed", "ok"]
    assert at_gateway[1]["error"] == INTERRUPTED
    local = runs(tmp_path, "a")
    assert [r["cost_usd"] for r in (at_gateway[0], at_gateway[2])] == [r["cost_usd"] for r in local]
    # The re-run continued the context as it was before the killed run (its session was
    # forked, and the fork only kept once a run ends): the first event is remembered, the
    # killed run's half is not.
    again = rerun[0]
    assert "ORCA" in again.all_text
    assert again.all_text.count("Crash here") == 1
    assert again.tool_uses(this_run=False) == []


async def test_no_shell_and_no_writes_outside_the_workspace(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"r{uniq}")
    outside = tmp_path / "outside" / "pwned.txt"
    outside.parent.mkdir()
    marker = tmp_path / "shell-ran"
    workspace = tmp_path / "ws"
    plan = [
        ("Bash", {"command": f"touch {marker}", "description": "x"}),
        ("Write", {"file_path": str(outside), "content": "stolen"}),
        ("Write", {"file_path": str(workspace / ".." / "outside" / "pwned.txt"), "content": "stolen"}),
        ("Write", {"file_path": str(workspace / "notes.md"), "content": "mine"}),
    ]

    def script(req: Request) -> Reply:
        done = len([b for b in req.tool_uses() if b["name"] in ("Bash", "Write")])
        if done < len(plan):
            name, args = plan[done]
            return use_tool(req, name, args)
        return replying("tried")(req)

    with ModelServer(script) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--workspace", str(workspace))
        try:
            await started(proc)
            await ask(world.alice, agent.agent_id, "Please run a command and write some files")
            await proc.wait_log(DONE)
        finally:
            await proc.stop()
        results = [r for req in model.agent_turns() for r in req.last_tool_results()]

    assert not marker.exists()
    assert not outside.exists()
    assert (workspace / "notes.md").read_text() == "mine"
    errors = [r for r in results if r.get("is_error")]
    assert len(errors) == 3, results  # Bash (not offered) and both escapes
    assert "Bash" not in model.agent_turns()[0].tool_names


async def test_sigterm_waits_for_nothing_when_idle(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"r{uniq}")
    with ModelServer() as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model)
        await started(proc)
        proc.signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            assert await proc.wait() == 0
        await process_exit(proc.pid)


async def test_a_model_api_error_is_retried_then_the_task_fails_and_the_inbox_moves_on(world, uniq, gateway,
                                                                                        tmp_path):
    agent = await world.alice.agent(f"r{uniq}")

    def script(req: Request) -> Reply | ApiError:
        if "Break" in req.prompt:
            return ApiError(400, message="scripted: this request is invalid")
        return Reply(text="fine")

    with ModelServer(script) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--attempts", "2")
        try:
            await started(proc)
            broken = await ask(world.alice, agent.agent_id, "Break, please")
            await proc.wait_log(r"task \S+ set to failed")
            n = len(proc.lines)
            fine = await ask(world.alice, agent.agent_id, "And now?")
            await proc.wait_log(DONE, after=n)
            at_gateway = await gateway_runs(world.alice, agent.agent_id, settled=3)  # each try a run
        finally:
            await proc.stop()
    got = await task_of(world.alice, broken["task_id"])
    assert got["state"] == "failed"
    assert "scripted: this request is invalid" in got["status_message"]["parts"][0]["text"]
    assert [r["outcome"] for r in runs(tmp_path, "a")] == ["error", "error", "ok"]  # --attempts 2
    assert [(r["task_id"], r["outcome"]) for r in at_gateway] == [
        (broken["task_id"], "failed"), (broken["task_id"], "failed"), (fine["task_id"], "ok")]
    assert "scripted: this request is invalid" in at_gateway[0]["error"]
    assert texts_by(await task_of(world.alice, fine["task_id"]), agent.agent_id) == ["fine"]

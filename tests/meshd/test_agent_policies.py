"""``mesh agent``'s collaboration policies against the real SDK, CLI and gateway.

The scripted model stand-in records every request, so a test asserts what the
policies passed to the SDK (effort, thinking) and what the model was shown and
allowed; the gateway shows what was posted. Waits are on log lines and requests.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.meshd.agent_support import (
    DONE,
    agent_proc,
    ask,
    closing,
    killed_mid_run_and_restarted,
    say,
    started,
    task_in_prompt,
    task_of,
    texts_by,
    wait_runs,
)
from tests.meshd.support import mesh_env, run_mesh
from tests.support.meshapi import AgentHandle, OwnerHandle
from tests.support.model_server import ApiError, ModelServer, Reply, Request, ToolCall, use_tool

NO_RUN = r"no run, "
MODEL = "claude-sonnet-4-6"


async def send(
    person: OwnerHandle | AgentHandle, to: str, text: str, context_id: str | None = None, **metadata: Any
) -> dict[str, Any]:
    message: dict[str, Any] = {"parts": [{"kind": "text", "text": text}]}
    if metadata:
        message["metadata"] = metadata
    body: dict[str, Any] = {"to_agent_id": to, "message": message}
    if context_id:
        body["context_id"] = context_id
    resp = await person.post("/v1/mesh/tasks", body)
    assert resp.status_code == 201, resp.text
    return resp.json()  # type: ignore[no-any-return]


def metrics(tmp: Path, name: str) -> dict[str, int]:
    path = tmp / f"state-{name}" / "policy-metrics.json"
    return json.loads(path.read_text()) if path.exists() else {}


def turn_for(model: ModelServer, task_id: str) -> Request:
    return next(r for r in model.agent_turns() if f"task_id: {task_id}" in r.prompt)


async def test_complexity_level_picks_effort_and_thinking_sent_to_the_model(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"r{uniq}")
    sender = await world.alice.agent(f"s{uniq}")
    await world.factory.befriend(sender, agent)
    with ModelServer(lambda req: Reply(text="done")) as model:
        # A model that takes effort, adaptive and disabled thinking: the CLI's default model rejects
        # disabled thinking and keeps adaptive (its "rejects_disabled_thinking" capability).
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--handshake", "off", "--model", MODEL)
        try:
            await started(proc)
            low = await ask(world.alice, agent.agent_id, "What is six times seven?")
            medium = await ask(world.alice, agent.agent_id, "Read the notes first, then summarise them.")
            high_zh = await ask(world.alice, agent.agent_id, "重构 task 模块的状态机逻辑，抽到独立文件")
            # Explicit beats inferred: a plain question sent as high, with `mesh send --complexity`.
            code, out, err = await run_mesh(
                "send",
                agent.agent_id,
                "What is 2+2?",
                "--complexity",
                "high",
                env=mesh_env(gateway, sender.api_key, tmp_path),
            )
            assert code == 0, err
            explicit_low = await send(world.alice, agent.agent_id, "Redesign the system", complexity="low")
            await wait_runs(proc, 5)
        finally:
            await proc.stop()
        high_cli = out.strip()
        got = {
            name: turn_for(model, t).body
            for name, t in [
                ("low", low["task_id"]),
                ("medium", medium["task_id"]),
                ("high_zh", high_zh["task_id"]),
                ("high_cli", high_cli),
                ("explicit_low", explicit_low["task_id"]),
            ]
        }
    effort = {k: (b.get("output_config") or {}).get("effort") for k, b in got.items()}
    thinking = {k: (b.get("thinking") or {}).get("type") for k, b in got.items()}
    assert effort == {
        "low": "low",
        "medium": "medium",
        "high_zh": "high",
        "high_cli": "high",
        "explicit_low": "low",
    }, effort
    assert thinking["medium"] == thinking["high_zh"] == thinking["high_cli"] == "adaptive", thinking
    assert thinking["low"] == thinking["explicit_low"] == "disabled", thinking
    # The level is on the reply's metadata and counted.
    reply = next(
        m
        for m in (await task_of(world.alice, high_zh["task_id"]))["messages"]
        if m["sender"] == agent.agent_id
    )
    assert reply["metadata"]["mesh_policy"]["complexity"] == "high"
    m = metrics(tmp_path, "a")
    assert m["complexity_low"] == 2 and m["complexity_medium"] == 1 and m["complexity_high"] == 2


def tool_results_text(req: Request) -> str:
    out = []
    for b in req.last_tool_results():
        c = b.get("content")
        out.append(c if isinstance(c, str) else " ".join(x.get("text", "") for x in c or []))
    return " ".join(out)


async def test_loop_guard_warns_then_stops_a_model_repeating_one_call(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"r{uniq}")
    # The model calls mesh_whoami with the same (empty) arguments forever.
    with ModelServer(lambda req: use_tool(req, "mesh_whoami", {})) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--max-turns", "25")
        try:
            await started(proc)
            task = await ask(world.alice, agent.agent_id, "Who are you?")
            await proc.wait_log(DONE)
        finally:
            await proc.stop()
        turns = model.agent_turns()
    calls = [b for b in turns[-1].tool_uses() if b["name"] == "mcp__mesh__mesh_whoami"]
    # The last request shows ten calls (the tenth denied with a warning); the eleventh, its answer,
    # stopped the run: no further request, and no turn limit (25) reached.
    assert len(calls) == 10, len(calls)
    warned = [r for r in turns if "Loop guard" in tool_results_text(r)]
    assert len(warned) == 1
    got = await task_of(world.alice, task["task_id"])
    assert got["state"] == "failed"
    [note] = texts_by(got, agent.agent_id)
    assert "runaway guard" in note and "11 times in a row" in note
    m = metrics(tmp_path, "a")
    assert m["guard_loop_warned"] == 1 and m["guard_loop_stopped"] == 1
    assert any("policy metric guard_loop_stopped=1" in line for line in proc.lines)


async def test_tool_storm_stops_a_run_and_a_failing_mesh_tool_is_switched_off(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"r{uniq}")

    def script(req: Request) -> Reply:
        n = len(req.tool_uses())
        if "storm" in req.prompt:  # different arguments each time: no loop, but many calls
            return use_tool(req, "mesh_whoami", {"n": n})
        if "switched off" in tool_results_text(req):
            return use_tool(req, "mesh_reply", {"task_id": task_in_prompt(req), "text": "gave up"})
        if req.called("mcp__mesh__mesh_reply"):
            return Reply(text="done")
        return use_tool(req, "mesh_get_task", {"task_id": f"no-such-task-{n}"})  # fails every time

    with ModelServer(script) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--max-tool-calls", "7")
        try:
            await started(proc)
            storm = await ask(world.alice, agent.agent_id, "storm")
            await proc.wait_log(DONE)
            n = len(proc.lines)
            failing = await ask(world.alice, agent.agent_id, "look up a task")
            await proc.wait_log(DONE, after=n)
        finally:
            await proc.stop()
        turns = model.agent_turns()
    got = await task_of(world.alice, storm["task_id"])
    assert got["state"] == "failed" and "more than 7 tool calls" in texts_by(got, agent.agent_id)[0]
    # The failing tool: five failures, then the sixth call is denied and the model moves on.
    last = [r for r in turns if "look up a task" in r.prompt][-1]
    assert last.called("mcp__mesh__mesh_get_task") == 6
    assert texts_by(await task_of(world.alice, failing["task_id"]), agent.agent_id) == ["gave up"]
    m = metrics(tmp_path, "a")
    assert m["guard_tool_storm"] == 1 and m["guard_tool_breaker"] == 1


async def test_circuit_breaker_stops_runs_for_a_context_and_tells_the_owner(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"r{uniq}")
    # Every model call fails (a 400 is not retried by the CLI): each run is a failed run.
    with ModelServer(lambda req: ApiError()) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--failed-runs", "2", "--attempts", "2")
        try:
            await started(proc)
            first = await ask(world.alice, agent.agent_id, "Summarise the report")
            await proc.wait_log("Circuit breaker: 2 runs in a row failed")
            n, before = len(proc.lines), len(model.agent_turns())
            # The same context again: no run at all.
            again = await send(world.alice, agent.agent_id, "Try once more", context_id=first["context_id"])
            await proc.wait_log("no run, circuit breaker open", after=n)
        finally:
            await proc.stop()
        assert len(model.agent_turns()) == before
    got = await task_of(world.alice, first["task_id"])
    assert got["state"] == "failed" and "Circuit breaker" in texts_by(got, agent.agent_id)[-1]
    assert (await task_of(world.alice, again["task_id"]))["state"] == "submitted"
    # The owner heard of it: a task from its agent to human@owner.
    resp = await world.alice.get("/v1/mesh/tasks", params={"limit": 50})
    assert resp.status_code == 200, resp.text
    told = [t for t in resp.json()["tasks"] if t["initiator"] == agent.agent_id]
    assert told, resp.json()
    m = metrics(tmp_path, "a")
    assert m["guard_breaker_opened"] == 1 and m["guard_breaker_skipped"] == 1


def thanking(req: Request) -> Reply:
    """A model that only ever says thanks, on whatever task it is woken for."""
    if req.called("mcp__mesh__mesh_reply") == 0:
        return use_tool(req, "mesh_reply", {"task_id": task_in_prompt(req), "text": "Thanks a lot!"})
    return Reply(text="Thanks!")


async def test_two_runtimes_that_only_say_thanks_stop_at_once(pair, gateway, tmp_path):
    a, b = pair
    with ModelServer(thanking) as model:
        pa = agent_proc(gateway, a, tmp_path, "a", model)
        pb = agent_proc(gateway, b, tmp_path, "b", model)
        try:
            await started(pa)
            await started(pb)
            task = await ask(a, b.agent_id, "Here is the report you asked for.")
            await pb.wait_log(DONE)
            # b thanked; a's runtime does not wake its model for a thank-you.
            await pa.wait_log(NO_RUN + "chit-chat")
        finally:
            await pa.stop()
            await pb.stop()
        assert len({task_in_prompt(r) for r in model.agent_turns()}) == 1
    got = await task_of(a, task["task_id"])
    # the report and one thank-you: no ping-pong (b's runtime closing the task aside)
    assert len([m for m in got["messages"] if not closing(m)]) == 2
    assert metrics(tmp_path, "a")["guard_chit_chat"] == 1
    assert not (tmp_path / "state-a" / "runs.jsonl").exists()


async def test_acknowledgements_start_no_run_and_the_third_closes_the_task(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"r{uniq}")

    def script(req: Request) -> Reply:
        return Reply(text="Thanks!" if "report" in req.prompt else "It is 42.")

    with ModelServer(script) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model, "--no-auto-complete")
        try:
            await started(proc)
            report = await ask(world.alice, agent.agent_id, "Here is the report.")
            await proc.wait_log(DONE)
            task = await ask(world.alice, agent.agent_id, "What is six times seven?")
            n = len(proc.lines)
            await proc.wait_log(DONE, after=n)
            for text in ("Thanks!", "ok 👍", "谢谢！"):
                await say(world.alice, task["task_id"], text)
            await proc.wait_log("policy metric guard_chit_chat_closed=1")
            # Each acknowledgement is one event without a run (the third may come after the close).
            after = 0
            for _ in range(3):
                line = await proc.wait_log(NO_RUN + "chit-chat", after=after)
                after = proc.lines.index(line, after) + 1
        finally:
            await proc.stop()
        assert len(model.agent_turns()) == 2
    # A final text that only thanks is not auto-posted.
    assert texts_by(await task_of(world.alice, report["task_id"]), agent.agent_id) == []
    got = await task_of(world.alice, task["task_id"])
    assert got["state"] == "completed"
    assert texts_by(got, agent.agent_id)[0] == "It is 42."
    m = metrics(tmp_path, "a")
    assert m["guard_chit_chat"] == 3 and m["guard_chit_chat_reply_dropped"] == 1


async def test_high_task_handshake_is_enforced_and_work_starts_after_the_confirmation(
    pair, gateway, tmp_path
):
    a, b = pair
    workspace = tmp_path / "state-b" / "workspace"

    def script(req: Request) -> Reply:
        task_id = task_in_prompt(req)
        if f"You are {a.agent_id}," in req.system:  # the sender's model answers the handshake
            if "handshake" in req.prompt and req.called("mcp__mesh__mesh_reply") == 0:
                return use_tool(
                    req, "mesh_reply", {"task_id": task_id, "text": "Confirmed; move the constants too."}
                )
            return Reply(text="ok")
        name = "fsm2.py" if "fsm2.py" in req.prompt else "fsm.py"
        if "semantic handshake" in req.prompt:  # b's handshake run: it tries to work anyway
            if req.called("Write") == 0:
                return Reply(tools=[ToolCall("Write", {"file_path": str(workspace / name), "content": "x"})])
            if req.called("mcp__mesh__mesh_reply") == 0:
                text = (
                    "Scope: the state machine. Approach: new fsm.py. Assumptions: no API change. "
                    "Open questions: constants?"
                )
                return use_tool(req, "mesh_reply", {"task_id": task_id, "text": text})
            return Reply(text="Waiting for the confirmation.")
        if req.called("Write") == 0:
            return Reply(tools=[ToolCall("Write", {"file_path": str(workspace / name), "content": "x"})])
        if req.called("mcp__mesh__mesh_reply") == 0:
            return use_tool(req, "mesh_reply", {"task_id": task_id, "text": f"Done: {name} written."})
        if req.called("mcp__mesh__mesh_set_task_status") == 0:
            return use_tool(req, "mesh_set_task_status", {"task_id": task_id, "state": "completed"})
        return Reply(text="finished")

    with ModelServer(script) as model:
        pb = agent_proc(gateway, b, tmp_path, "b", model)
        pa = agent_proc(gateway, a, tmp_path, "a", model)
        try:
            await started(pb)
            task = await send(a, b.agent_id, "Refactor the task module: move the state machine into fsm.py")
            await pb.wait_log(DONE)
            # After the handshake run: the understanding, input-required, and no work done.
            mid = await task_of(a, task["task_id"])
            assert mid["state"] == "input-required"
            assert not (workspace / "fsm.py").exists()
            [understanding] = [
                m
                for m in mid["messages"]
                if m["sender"] == b.agent_id and m["parts"] and "Scope:" in m["parts"][0].get("text", "")
            ]
            assert understanding["metadata"]["mesh_policy"] == {
                "complexity": "high",
                "handshake": "understanding",
            }
            # The sender's runtime recognises the handshake; its model confirms; b does the work.
            n = len(pb.lines)
            await started(pa)
            await pa.wait_log(DONE)
            await pb.wait_log(DONE, after=n)
            # A sender may waive the handshake: the first run works at once.
            n = len(pb.lines)
            waived = await send(a, b.agent_id, "Refactor the parser into fsm2.py", handshake=False)
            await pb.wait_log(DONE, after=n)
        finally:
            await pa.stop()
            await pb.stop()
        turns = model.agent_turns()
    sender_turn = next(r for r in turns if f"You are {a.agent_id}," in r.system)
    assert f"This message is {b.agent_id}'s handshake" in sender_turn.prompt
    handshake_turns = [r for r in turns if "semantic handshake" in r.prompt]
    assert handshake_turns and "runtime denies" in handshake_turns[0].prompt
    denied = next(r for r in handshake_turns if r.called("Write") == 1 and r.last_tool_results())
    assert "denied: this run is the handshake" in tool_results_text(denied)
    assert (workspace / "fsm.py").exists() and (workspace / "fsm2.py").exists()
    done = await task_of(a, task["task_id"])
    assert done["state"] == "completed"
    assert texts_by(done, b.agent_id)[-1] == "Done: fsm.py written."
    assert (await task_of(a, waived["task_id"]))["state"] == "completed"
    mb, ma = metrics(tmp_path, "b"), metrics(tmp_path, "a")
    assert mb["handshake_requested"] == 1 and mb["handshake_denied"] == 1 and mb["handshake_confirmed"] == 1
    assert ma["handshake_answered"] == 1


def labelled(task: dict[str, Any], sender: str) -> tuple[str, dict[str, Any]]:
    m = [m for m in task["messages"] if m["sender"] == sender and not closing(m)][-1]
    return m["parts"][0]["text"], m["metadata"]["mesh_verification"]


async def test_verification_labels_come_from_hooks_and_re_runs_not_from_the_reply(
    world, uniq, gateway, tmp_path
):
    checked = await world.alice.agent(f"c{uniq}")  # a workspace with a configured check
    shell = await world.alice.agent(f"s{uniq}")  # no checks; the model may use Bash
    flag = tmp_path / "state-c" / "workspace" / "ok.flag"

    def script(req: Request) -> Reply:
        task_id = task_in_prompt(req)
        if "make it pass" in req.prompt and req.called("Write") == 0:
            return Reply(tools=[ToolCall("Write", {"file_path": str(flag), "content": "ok"})])
        for word, cmd in (("succeed", "true"), ("fail", "exit 3")):
            if f"run and {word}" in req.prompt and req.called("Bash") == 0:
                return Reply(tools=[ToolCall("Bash", {"command": cmd, "description": "check"})])
        if req.called("mcp__mesh__mesh_reply") == 0:
            return use_tool(req, "mesh_reply", {"task_id": task_id, "text": "Done; all tests pass."})
        return Reply(text="replied")

    with ModelServer(script) as model:
        pc = agent_proc(gateway, checked, tmp_path, "c", model, "--check", "test -f ok.flag")
        ps = agent_proc(gateway, shell, tmp_path, "s", model, "--allow-tool", "Bash")
        try:
            await started(pc)
            await started(ps)
            claim = await ask(world.alice, checked.agent_id, "Fix the tests")
            await pc.wait_log(DONE)
            fixed = await ask(world.alice, checked.agent_id, "Fix the tests and make it pass")
            ok = await ask(world.alice, shell.agent_id, "Check: run and succeed")
            bad = await ask(world.alice, shell.agent_id, "Check: run and fail")
            bare = await ask(world.alice, shell.agent_id, "Fix the tests")
            await wait_runs(pc, 2)
            await wait_runs(ps, 3)
        finally:
            await pc.stop()
            await ps.stop()
    want = {
        claim["task_id"]: (
            checked,
            "failed checks",
            [{"command": "test -f ok.flag", "exit_code": 1, "by": "runtime"}],
        ),
        fixed["task_id"]: (
            checked,
            "independently verified",
            [{"command": "test -f ok.flag", "exit_code": 0, "by": "runtime"}],
        ),
        ok["task_id"]: (shell, "agent verified", [{"command": "true", "exit_code": 0, "by": "agent"}]),
        bad["task_id"]: (shell, "failed checks", [{"command": "exit 3", "exit_code": 3, "by": "agent"}]),
        bare["task_id"]: (shell, "unverified", []),
    }
    for task_id, (who, label, checks) in want.items():
        text, meta = labelled(await task_of(world.alice, task_id), who.agent_id)
        # The same words ("all tests pass") in every reply; the label is what the checks said.
        assert text.startswith("Done; all tests pass.") and f"[verification: {label}" in text, text
        assert meta == {"label": label, "checks": checks}, (label, meta)
    mc, ms = metrics(tmp_path, "c"), metrics(tmp_path, "s")
    assert mc["label_failed_checks"] == 1 and mc["label_independently_verified"] == 1
    assert ms["label_agent_verified"] == 1 and ms["label_failed_checks"] == 1 and ms["label_unverified"] == 1


async def test_high_task_plan_survives_kill_9_and_the_resumed_run_is_told_the_open_step(
    world, uniq, gateway, tmp_path
):
    import threading

    agent = await world.alice.agent(f"r{uniq}")
    hold = threading.Event()
    first_try = {"on": True}

    def script(req: Request) -> Reply:
        if "Your plan for this task" in req.prompt:  # the resumed run
            if req.called("mcp__mesh__mesh_reply") == 0:
                return use_tool(
                    req, "mesh_reply", {"task_id": task_in_prompt(req), "text": "Finished the plan."}
                )
            return Reply(text="done")
        m = re.search(r"write your plan to (\S+) as", req.prompt)
        assert m, req.prompt
        if req.called("Write") == 0:
            plan = "- [x] step one\n- [ ] step two\n- [ ] step three\n"
            return Reply(tools=[ToolCall("Write", {"file_path": m.group(1), "content": plan})])
        if first_try["on"]:
            hold.wait(30)  # the plan is written and one step ticked; the agent dies mid-run
        return Reply(text="done")

    with ModelServer(script) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model)
        try:
            await started(proc)
            task = await send(world.alice, agent.agent_id, "Migrate the parser", handshake=False)
            await model.wait_turns(2)
            proc, before = await killed_mid_run_and_restarted(proc, gateway, agent, tmp_path,
                                                              model, first_try, hold)
        finally:
            hold.set()
            await proc.stop()
        resumed = model.agent_turns()[before]
    plan_file = tmp_path / "state-a" / "workspace" / f"{task['task_id']}.plan.md"
    assert plan_file.exists()
    assert f"Your plan for this task, {plan_file}, is unfinished" in resumed.prompt
    assert "Done: step one" in resumed.prompt and "Next unchecked step: step two" in resumed.prompt
    assert texts_by(await task_of(world.alice, task["task_id"]), agent.agent_id) == ["Finished the plan."]
    assert metrics(tmp_path, "a")["plan_resumed"] == 1


async def test_notes_and_claude_md_of_the_workspace_are_in_the_next_system_prompt(
    world, uniq, gateway, tmp_path
):
    agent = await world.alice.agent(f"r{uniq}")
    workspace = tmp_path / "state-a" / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "CLAUDE.md").write_text("Project: the billing service. Python 3.11.\n")

    def script(req: Request) -> Reply:
        if "Remember this" in req.prompt and req.called("Write") == 0:
            note = "# Learnings\n\n- Alice wants answers in metres.\n"
            m = re.search(r"append it to (\S+/learnings\.md)", req.prompt)  # the sender's notes
            assert m, req.prompt
            path = str(workspace / m.group(1))
            return Reply(tools=[ToolCall("Write", {"file_path": path, "content": note})])
        return Reply(text="Noted.")

    with ModelServer(script) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model)
        try:
            await started(proc)
            await ask(world.alice, agent.agent_id, "Remember this: I want metres.")
            await proc.wait_log(DONE)
            n = len(proc.lines)
            await ask(world.alice, agent.agent_id, "How far is it?")
            await proc.wait_log(DONE, after=n)
        finally:
            await proc.stop()
        first, *_, last = model.agent_turns()
    (peer,) = (workspace / "notes").iterdir()  # one folder per peer: here the owner
    assert sorted(p.name for p in peer.iterdir()) == ["decisions.md", "issues.md", "learnings.md"]
    assert "the billing service" in first.system and "metres" not in first.system
    assert f"--- notes/{peer.name}/learnings.md ---" in last.system
    assert "Alice wants answers in metres." in last.system and "<untrusted-notes>" in last.system
    assert f"append it to notes/{peer.name}/learnings.md" in first.prompt  # the reminder


async def test_policies_section_of_the_docs_runs_as_written(world, uniq, gateway, tmp_path):
    import asyncio

    from tests.meshd.support import Proc
    from tests.meshd.test_agent_docs import doc_env, marked

    helper = await world.alice.agent(f"helper{uniq}")
    sender = await world.alice.agent(f"s{uniq}")
    await world.factory.befriend(sender, helper)

    def script(req: Request) -> Reply:
        if req.called("mcp__mesh__mesh_reply") == 0:
            text = "Scope: the parser. Approach: a new module. Assumptions: none. Open questions: none."
            return use_tool(req, "mesh_reply", {"task_id": task_in_prompt(req), "text": text})
        return Reply(text="Waiting.")

    with ModelServer(script) as model:
        env = doc_env(tmp_path, gateway, helper.api_key, model)
        proc = Proc(["bash", "-c", marked("meshd-agent-policies")], env, name="doc agent")
        try:
            await proc.start()
            await proc.wait_log("following the SSE stream")
            send_env = {**env, "MESH_API_KEY": sender.api_key, "HELPER": helper.agent_id}
            sh = await asyncio.create_subprocess_exec(
                "bash", "-c", marked("meshd-send-complexity"), env=send_env, stdout=asyncio.subprocess.PIPE
            )
            out, _ = await sh.communicate()
            assert sh.returncode == 0
            await proc.wait_log(DONE)
        finally:
            await proc.stop()
        first = model.agent_turns()[0]
    task_id = out.decode().strip()
    assert (first.body.get("output_config") or {}).get("effort") == "high"
    got = await task_of(sender, task_id)
    assert got["state"] == "input-required"
    assert texts_by(got, helper.agent_id)[0].startswith("Scope: the parser.")
    assert (tmp_path / "home" / "agents" / "helper" / "notes").is_dir()

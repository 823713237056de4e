"""The owner's daily budget, against a real ``mesh agent`` (SDK and CLI), the real
gateway and console, the model being the scripted stand-in whose usage the CLI
prices: the budget stops the next run, never the current one, and the task gets
a note naming it."""

from __future__ import annotations

import asyncio

from tests.meshd.agent_support import DONE, agent_proc, ask, console_get, runs, started, task_of
from tests.support.model_server import ModelServer, Reply, Request

STOPPED = r"no run: Not started: this agent's daily budget"


def costly(req: Request) -> Reply:
    reply = Reply(text="It is 42.")
    reply.input_tokens, reply.output_tokens = 20_000, 3_000  # cents per run, priced by the CLI
    return reply


async def _gateway_runs(owner, agent_id: str, ended: int) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    """The agent's runs at the gateway once ``ended`` of them reported their end."""
    async with asyncio.timeout(30):
        while True:
            got = (await owner.get(f"/v1/agents/{agent_id}/runs")).json()["runs"]
            if sum(r["outcome"] != "running" for r in got) >= ended:
                return got  # type: ignore[no-any-return]
            await asyncio.sleep(0.05)


async def test_the_daily_budget_stops_the_next_run_not_the_current_one(world, uniq, gateway,
                                                                         tmp_path):
    agent = await world.alice.agent(f"b{uniq}")
    path = f"/v1/agents/{agent.agent_id}"
    # A budget far below one run's cost: the first run still runs to its end.
    assert (await world.alice.patch(path, {"daily_budget_usd": 0.01})).status_code == 200
    with ModelServer(costly) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model)
        try:
            await started(proc)
            first = await ask(world.alice, agent.agent_id, "6*7?")
            await proc.wait_log(DONE)
            [run] = await _gateway_runs(world.alice, agent.agent_id, 1)
            turns_before = len(model.agent_turns())

            n = len(proc.lines)
            second = await ask(world.alice, agent.agent_id, "5*8?")
            await proc.wait_log(STOPPED, after=n)
            assert len(model.agent_turns()) == turns_before  # no model call at all
            page = await console_get(world.alice, f"/console/agents/{agent.agent_id}")

            # The owner raises the budget: runs start again.
            assert (await world.alice.patch(path, {"daily_budget_usd": 100})).status_code == 200
            n = len(proc.lines)
            third = await ask(world.alice, agent.agent_id, "9*9?")
            await proc.wait_log(DONE, after=n)
            at_gateway = await _gateway_runs(world.alice, agent.agent_id, 2)
        finally:
            await proc.stop()

    [rec_first, rec_third] = runs(tmp_path, "a")
    assert run["outcome"] == "ok" and run["cost_usd"] == rec_first["cost_usd"] > 0.01
    got = await task_of(world.alice, first["task_id"])
    assert got["state"] == "completed", [(m["sender"], m["parts"][0].get("text")) for m in got["messages"]]

    stopped = await task_of(world.alice, second["task_id"])
    assert stopped["state"] == "failed"
    note = stopped["status_message"]["parts"][0]
    assert "daily budget of $0.01 is spent" in note["text"], note
    assert note["metadata"]["mesh_budget"] == {"daily_budget_usd": 0.01,
                                               "spent_today_usd": rec_first["cost_usd"]}
    # The console shows the budget reached and today's spend.
    assert f"${rec_first['cost_usd']:.4f}</strong> of a daily budget of <strong>$0.01" in page
    assert "reached" in page

    assert (await task_of(world.alice, third["task_id"]))["state"] == "completed"
    assert len(at_gateway) == 2  # runs counted at the gateway = runs made
    assert sorted(r["cost_usd"] for r in at_gateway) == sorted(
        (rec_first["cost_usd"], rec_third["cost_usd"]))
    me = (await agent.get("/v1/mesh/me")).json()
    assert me["spent_today_usd"] == round(rec_first["cost_usd"] + rec_third["cost_usd"], 6)

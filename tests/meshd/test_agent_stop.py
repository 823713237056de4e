"""``mesh agent`` stopping: ``draining`` only while it finishes its work, then ``inactive``.

The real agent process, SDK and CLI, the real gateway and console; the model is the
scripted stand-in, which holds the run's first turn so the stop lands mid-run.
"""

from __future__ import annotations

import re
import signal
import threading

from tests.meshd.agent_support import DONE, agent_proc, ask, console_get, started
from tests.support.isolated import wait_until
from tests.support.model_server import ModelServer, Reply, Request

FINISHING = "is finishing and taking no new work"


async def test_a_clean_stop_drains_the_running_work_then_leaves_the_agent_inactive(world, uniq, gateway,
                                                                                 tmp_path):
    agent = await world.alice.agent(f"s{uniq}")
    hold = threading.Event()

    def script(req: Request) -> Reply:
        hold.wait(60)  # the CLI waits for the model: the run is in progress meanwhile
        return Reply(text="All done.")

    async def status() -> str:
        resp = await agent.get("/v1/mesh/me")
        assert resp.status_code == 200, resp.text
        return str(resp.json()["status"])

    with ModelServer(script) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model)
        try:
            await started(proc)
            assert await status() == "active"
            await ask(world.alice, agent.agent_id, "Take your time.")
            await model.wait_turns(1)
            proc.signal(signal.SIGTERM)
            await proc.wait_log("is now draining")
            # finishing the current work: draining, and the dashboard says so
            assert await status() == "draining"
            assert FINISHING in await console_get(world.alice, "/console/")
            hold.set()
            assert await proc.wait() == 0
        finally:
            hold.set()
            await proc.stop()
    assert any(re.search(DONE, line) for line in proc.lines)  # the run finished before the exit

    async def inactive() -> bool:
        return await status() == "inactive"

    await wait_until(inactive, "the stopped agent inactive", 30)
    assert FINISHING not in await console_get(world.alice, "/console/")


async def test_an_idle_agent_stopped_is_inactive_at_once(world, uniq, gateway, tmp_path):
    agent = await world.alice.agent(f"i{uniq}")
    with ModelServer(lambda req: Reply(text="hi")) as model:
        proc = agent_proc(gateway, agent, tmp_path, "a", model)
        try:
            await started(proc)
            proc.signal(signal.SIGTERM)
            assert await proc.wait() == 0
        finally:
            await proc.stop()
    assert not any("is now draining" in line for line in proc.lines)  # no work was running
    resp = await agent.get("/v1/mesh/me")
    assert resp.json()["status"] == "inactive"

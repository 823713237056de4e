"""An A2A client reaches a mesh agent whose daemon is stopped; the daemon starts
later, handles the task from its inbox, and its reply and the task's state
changes stream back to the A2A client (ADR 017)."""

from __future__ import annotations

import asyncio

from a2a.types.a2a_pb2 import TaskState

from tests.a2a_helpers import a2a_client, text_message
from tests.meshd.support import Probe
from tests.meshd.test_daemon_gateway import daemon, skip_backlog, stop


async def test_a2a_to_an_offline_daemon_then_its_reply_streams_back(pair, gateway, tmp_path):
    a, b = pair
    await skip_backlog(gateway, b)
    async with asyncio.timeout(120), a2a_client(gateway, b.agent_id, a.headers) as client:
        stream = client.send_message(text_message("hello from A2A"))
        snapshot = await anext(stream)
        task_id = snapshot.task.id  # answered while b's daemon is not running
        assert snapshot.task.status.state == TaskState.TASK_STATE_SUBMITTED
        async with Probe(tmp_path / "p.sock") as probe:
            b_daemon = daemon(gateway, b, tmp_path, "B", "--handler",
                              "tests.meshd.sample_handlers:echo",
                              TEST_OUT=str(tmp_path / "b.out"), TEST_PROBE=str(probe.path))
            try:
                await b_daemon.start()
                reply = await anext(stream)
                await probe.wait_for(1, prefix="B ")
                assert await stop(b_daemon) == 0
            finally:
                await b_daemon.stop()
        status = reply.status_update.status
        assert reply.status_update.task_id == task_id
        assert status.message.parts[0].text == "re: hello from A2A"
        assert status.message.metadata["agent-mesh.sender"] == b.agent_id
        # The serving side moves the task on (here through the mesh API): the
        # stream carries each state and ends at the terminal one.
        for state in ("working", "completed"):
            r = await b.post(f"/v1/mesh/tasks/{task_id}/status", {"state": state})
            assert r.status_code == 200, r.text
        rest = [e.status_update.status.state async for e in stream]
    assert rest == [TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED]
    handled = (tmp_path / "b.out").read_text().splitlines()
    assert [line.split(" ", 3)[2:] for line in handled] == [["task.created", "hello from A2A"]]

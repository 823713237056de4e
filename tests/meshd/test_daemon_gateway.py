"""``mesh daemon`` as a real process against the real gateway.

Handlers report each handled event to a Unix socket (``Probe``) and append it to
a file; the tests await the reports and count the file's lines — the side
effects — to prove "in order, once".
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

from meshd import MeshClient
from meshd.daemon.run_reports import INTERRUPTED
from tests.meshd.support import REPO, Probe, Proc, gateway_runs, mesh_cmd, mesh_env, process_exit

EXEC = f"{sys.executable} {REPO / 'tests' / 'meshd' / 'exec_handler.py'}"
FAST = ["--reconnect-initial", "0.2", "--reconnect-max", "2", "--heartbeat", "5"]


def daemon(url: str, handle, tmp: Path, name: str, *args: str, **env: str) -> Proc:
    e = mesh_env(url, handle.api_key, tmp, TEST_NAME=f"{name} ", **env)
    argv = mesh_cmd("daemon", "--state-dir", str(tmp / f"state-{name}"), *FAST, *args)
    return Proc(argv, e, name=f"daemon {name}")


def lines(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split(" ", 3) for line in path.read_text().splitlines()]


async def skip_backlog(url: str, handle) -> None:
    """Ack what is already in the inbox (the friendship event), so counts start at zero."""
    async with MeshClient(url, api_key=handle.api_key) as c:
        await c.ack((await c.me())["inbox_seq"])


async def stop(proc: Proc) -> int:
    proc.signal(signal.SIGTERM)
    return await proc.wait(timeout=20)


@pytest.mark.slow
async def test_two_daemons_exchange_500_messages_in_order(pair, gateway, tmp_path):
    a_h, b_h = pair
    n = 500
    async with Probe(tmp_path / "p.sock") as probe:
        env = {"TEST_PROBE": str(probe.path)}
        b = daemon(
            gateway, b_h, tmp_path, "B", "--handler", "tests.meshd.sample_handlers:echo",
            TEST_OUT=str(tmp_path / "b.out"), **env,
        )  # fmt: skip
        a = daemon(
            gateway, a_h, tmp_path, "A", "--handler", "tests.meshd.sample_handlers:record",
            TEST_OUT=str(tmp_path / "a.out"), **env,
        )  # fmt: skip
        try:
            await b.start()
            await a.start()
            await b.wait_log("following the SSE stream")
            await a.wait_log("following the SSE stream")
            async with MeshClient(gateway, api_key=a_h.api_key) as sender:
                for i in range(n):
                    await sender.send(b_h.agent_id, f"msg-{i}")
            await probe.wait_for(n + 1, prefix="B ")
            await probe.wait_for(n + 1, prefix="A ")
            assert await stop(b) == 0
            assert await stop(a) == 0
        finally:
            await a.stop()
            await b.stop()

    # (each inbox also starts with the friendship's event, handled like any other)
    got_b = [x for x in lines(tmp_path / "b.out") if x[2] == "task.created"]
    got_a = [x for x in lines(tmp_path / "a.out") if x[2] == "task.message"]
    # B: every task once, in the order sent, seqs consecutive
    assert [t for _, _, _, t in got_b] == [f"msg-{i}" for i in range(n)]
    seqs = [int(s) for s, *_ in got_b]
    assert seqs == list(range(seqs[0], seqs[0] + n))
    assert len({e for _, e, _, _ in got_b}) == n
    # A: every reply once, in the order B answered
    assert [t for *_, t in got_a] == [f"re: msg-{i}" for i in range(n)]
    assert len({e for _, e, _, _ in got_a}) == n
    # both acked everything and, stopped cleanly, are offline (not "finishing" forever)
    for h in (a_h, b_h):
        async with MeshClient(gateway, api_key=h.api_key) as c:
            me = await c.me()
        assert me["acked_seq"] == me["inbox_seq"] and me["status"] == "inactive"


async def test_kill_9_mid_handler_then_restart_runs_each_event_once(world, pair, gateway, tmp_path):
    a_h, b_h = pair
    texts = ["m0", "m1", "m2", "m3", "m4", "block", "m6", "m7", "m8", "m9"]
    marker = tmp_path / "block"
    marker.write_text("")
    out = tmp_path / "b.out"
    async with Probe(tmp_path / "p.sock") as probe:
        env = {"TEST_PROBE": str(probe.path), "TEST_OUT": str(out), "TEST_BLOCK_MARKER": str(marker)}
        await skip_backlog(gateway, b_h)
        b = daemon(gateway, b_h, tmp_path, "B", "--exec", EXEC, **env)
        try:
            await b.start()
            async with MeshClient(gateway, api_key=a_h.api_key) as sender:
                tasks = [await sender.send(b_h.agent_id, t) for t in texts]
                started = await probe.wait_for(1, prefix="started ")
                assert len(await probe.wait_for(5, prefix="done ")) == 5
                b.signal(signal.SIGKILL)
                assert await b.wait() == -signal.SIGKILL
                # the handler it was running died with it (it cannot finish behind our back)
                await process_exit(int(started[0].split()[2]), timeout=10)

                b = daemon(gateway, b_h, tmp_path, "B", "--exec", EXEC, **env)
                await b.start()
                await probe.wait_for(10, prefix="done ")
                assert await stop(b) == 0

                # exactly one reply per task: nothing answered twice
                for text, task in zip(texts, tasks, strict=True):
                    full = await sender.get_task(task.task_id)
                    assert [m.text for m in full.messages] == [text, f"re: {text}"]
        finally:
            print(b.log())
            await b.stop()
    got = lines(out)
    assert [t for *_, t in got] == texts  # each event's side effect once, in order
    block_seq = int(started[0].split()[1])
    assert int(got[5][0]) == block_seq
    assert probe.lines.count(f"done {block_seq}") == 1
    # The owner sees every run: ten that ended well and the one the kill cut short,
    # reported failed by the restarted daemon.
    at_gateway = await gateway_runs(world.bob, b_h.agent_id, settled=11)
    assert [(r["outcome"], r["exit_status"]) for r in at_gateway].count(("ok", 0)) == 10
    [cut] = [r for r in at_gateway if r["outcome"] == "failed"]
    assert cut["error"] == INTERRUPTED and cut["task_id"] == tasks[5].task_id
    assert len(at_gateway) == 11 and len({r["run_id"] for r in at_gateway}) == 11


async def test_failing_handler_fails_the_task_and_the_inbox_moves_on(world, pair, gateway, tmp_path):
    a_h, b_h = pair
    out = tmp_path / "b.out"
    async with Probe(tmp_path / "p.sock") as probe:
        await skip_backlog(gateway, b_h)
        b = daemon(
            gateway, b_h, tmp_path, "B", "--exec", EXEC, "--attempts", "2",
            "--retry-initial", "0.1", "--timeout", "2", TEST_PROBE=str(probe.path),
            TEST_OUT=str(out),
        )  # fmt: skip
        try:
            await b.start()
            async with MeshClient(gateway, api_key=a_h.api_key) as sender:
                bad = await sender.send(b_h.agent_id, "fail")
                slow = await sender.send(b_h.agent_id, "hang")  # past --timeout
                good = await sender.send(b_h.agent_id, "after")
                await probe.wait_for(1, prefix="done ")
                assert await stop(b) == 0  # the reply is posted before the daemon exits
                failed = await sender.get_task(bad.task_id)
                assert failed.state == "failed"
                assert "no such skill" in json.dumps(failed.status_message)
                assert (await sender.get_task(slow.task_id)).state == "failed"
                assert (await sender.get_task(good.task_id)).messages[-1].text == "re: after"
            assert b.count("handler failed on seq") == 2  # attempt 1 of 2 logged, then gave up
            assert b.count("giving up") == 2
        finally:
            print(b.log())
            await b.stop()
    assert [t for *_, t in lines(out)] == ["after"]
    # Each attempt is a run at the gateway: its exit status and stderr, or the limit.
    at_gateway = await gateway_runs(world.bob, b_h.agent_id, settled=5)
    assert [(r["task_id"], r["outcome"], r["exit_status"], r["limit_hit"]) for r in at_gateway] == [
        (bad.task_id, "failed", 3, None), (bad.task_id, "failed", 3, None),
        (slow.task_id, "limit", None, "time limit"), (slow.task_id, "limit", None, "time limit"),
        (good.task_id, "ok", 0, None)]
    assert all("no such skill" in r["error"] for r in at_gateway[:2])
    assert "timed out after 2s" in at_gateway[2]["error"]
    assert all(r["duration_ms"] is not None for r in at_gateway)


async def test_sigterm_drains_while_the_handler_finishes_then_goes_inactive(pair, gateway, tmp_path):
    a_h, b_h = pair
    out = tmp_path / "b.out"
    async with Probe(tmp_path / "p.sock") as probe:
        await skip_backlog(gateway, b_h)
        b = daemon(
            gateway, b_h, tmp_path, "B", "--exec", EXEC,
            TEST_PROBE=str(probe.path), TEST_OUT=str(out),
        )  # fmt: skip
        try:
            await b.start()
            async with MeshClient(gateway, api_key=a_h.api_key) as sender:
                await sender.send(b_h.agent_id, "slow")
                started = await probe.wait_for(1, prefix="started ")
                slow_seq = int(started[0].split()[1])
                b.signal(signal.SIGTERM)
                await b.wait_log("stop requested")
                await sender.send(b_h.agent_id, "too late")
                assert await b.wait(timeout=20) == 0
            log = b.log()
            # draining while the handler finished, then offline
            assert log.index("is now draining") < log.index("is now inactive")
        finally:
            print(b.log())
            await b.stop()
    assert [t for *_, t in lines(out)] == ["slow"]  # finished; nothing new was started
    async with MeshClient(gateway, api_key=b_h.api_key) as c:
        me = await c.me()
    assert me["status"] == "inactive"
    assert me["acked_seq"] == slow_seq and me["inbox_seq"] == slow_seq + 1


async def test_redelivered_events_are_skipped_by_the_dedup_window(pair, gateway, tmp_path):
    a_h, b_h = pair
    out = tmp_path / "b.out"
    env = {"TEST_OUT": str(out)}
    async with Probe(tmp_path / "p.sock") as probe:
        env["TEST_PROBE"] = str(probe.path)
        handler = ("--handler", "tests.meshd.sample_handlers:record", "--no-reply")
        await skip_backlog(gateway, b_h)
        b = daemon(gateway, b_h, tmp_path, "B", *handler, **env)
        try:
            await b.start()
            async with MeshClient(gateway, api_key=a_h.api_key) as sender:
                for i in range(5):
                    await sender.send(b_h.agent_id, f"x{i}")
                await probe.wait_for(5)
                assert await stop(b) == 0
                # lose the cursor but keep the window: the gateway re-sends all five
                state_file = tmp_path / "state-B" / "state.json"
                state = json.loads(state_file.read_text())
                assert len(state["handled"]) == 5
                state["cursor"] -= 5
                state_file.write_text(json.dumps(state))
                b = daemon(gateway, b_h, tmp_path, "B", *handler, **env)
                await b.start()
                await sender.send(b_h.agent_id, "x5")
                await probe.wait_for(6)
                assert await stop(b) == 0
                assert "5 duplicates skipped" in await b.wait_log("stopped:")
        finally:
            print(b.log())
            await b.stop()
    assert [t for *_, t in lines(out)] == [f"x{i}" for i in range(6)]

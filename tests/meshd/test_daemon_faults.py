"""The daemon through faults: SSE cut, gateway killed and restarted, tokens expiring.

The gateway here is real (its own uvicorn process, or the session's gateway
behind a TCP relay that can cut connections and refuse the SSE path).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from meshd import MeshClient
from tests.meshd.support import (
    REPO,
    GatewayProc,
    Probe,
    Proc,
    Proxy,
    gateway_runs,
    mesh_cmd,
    mesh_env,
)

# kills and restarts the gateway, cuts SSE, waits for token expiry
pytestmark = pytest.mark.faults

SSE = "following the SSE stream"
FAST = ["--reconnect-initial", "0.3", "--reconnect-max", "2", "--poll-wait", "2"]


def record_daemon(url: str, handle, tmp: Path, probe: Probe, *extra: str,
                  handler: str = "tests.meshd.sample_handlers:record") -> Proc:
    env = mesh_env(url, handle.api_key, tmp, TEST_OUT=str(tmp / "out"), TEST_PROBE=str(probe.path))
    argv = mesh_cmd(
        "daemon", "--handler", handler, "--no-reply",
        "--state-dir", str(tmp / "state"), *FAST, *extra,
    )  # fmt: skip
    return Proc(argv, env, name="daemon")


def handled_texts(tmp: Path) -> list[str]:
    rows = [line.split(" ", 3) for line in (tmp / "out").read_text().splitlines()]
    seqs = [int(r[0]) for r in rows]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "out of order or repeated"
    assert len({r[1] for r in rows}) == len(rows), "an event id was handled twice"
    return [r[3] for r in rows if r[2] == "task.created"]


@contextlib.asynccontextmanager
async def running(d: Proc) -> AsyncIterator[Proc]:
    """``d`` started and on SSE; when the body ends, stopped with SIGTERM and exiting
    0; whatever happens, its log printed and the process gone."""
    try:
        await d.start()
        await d.wait_log(SSE)
        yield d
        d.signal(signal.SIGTERM)
        assert await d.wait(timeout=20) == 0
    finally:
        print(d.log())
        await d.stop()


@contextlib.asynccontextmanager
async def serving(gw: GatewayProc, d: Proc) -> AsyncIterator[Proc]:
    """:func:`running` for a daemon of the test's own gateway ``gw``, which is
    killed afterwards too."""
    try:
        async with running(d):
            yield d
    finally:
        await gw.kill()


async def skip_backlog(url: str, handle) -> None:
    async with MeshClient(url, api_key=handle.api_key) as c:
        await c.ack((await c.me())["inbox_seq"])


async def test_sse_cut_and_refused_falls_back_to_long_poll_and_comes_back(pair, gateway, tmp_path):
    a_h, b_h = pair
    await skip_backlog(gateway, b_h)
    port = int(gateway.rsplit(":", 1)[1])
    async with Proxy(port) as proxy, Probe(tmp_path / "p.sock") as probe, \
            running(record_daemon(proxy.url, b_h, tmp_path, probe)) as d:
        async with MeshClient(gateway, api_key=a_h.api_key) as sender:
            # SSE is cut and refused (503): the daemon must long-poll
            proxy.blocked.add("/v1/mesh/inbox/stream")
            mark = len(d.lines)
            proxy.drop_all()
            await d.wait_log("SSE unavailable", after=mark)
            for i in range(10):
                await sender.send(b_h.agent_id, f"p{i}")
            await probe.wait_for(10)
            async with asyncio.timeout(30):
                await proxy.refused.wait()  # it did try SSE again, and was refused
            assert d.count(SSE) == 1, "no SSE while it is refused"
            # SSE comes back: the daemon returns to it
            mark = len(d.lines)
            proxy.blocked.clear()
            await d.wait_log(SSE, after=mark)
            for i in range(10, 20):
                await sender.send(b_h.agent_id, f"p{i}")
            await probe.wait_for(20)
    assert handled_texts(tmp_path) == [f"p{i}" for i in range(20)]


async def test_a_gateway_without_claims_is_used_without_them(pair, gateway, tmp_path):
    """An older gateway answers 404 to the claim: the daemon says so once, stops
    asking, and handles every event in order all the same."""
    a_h, b_h = pair
    await skip_backlog(gateway, b_h)
    port = int(gateway.rsplit(":", 1)[1])
    async with Proxy(port) as proxy, Probe(tmp_path / "p.sock") as probe:
        proxy.absent.add("/v1/mesh/inbox/claim")
        async with running(record_daemon(proxy.url, b_h, tmp_path, probe)) as d, \
                MeshClient(gateway, api_key=a_h.api_key) as sender:
            for i in range(10):
                await sender.send(b_h.agent_id, f"n{i}")
            await probe.wait_for(10)
        assert proxy.requests["/v1/mesh/inbox/claim"] == 1, "asked again after the 404"
        assert d.count("takes no claims") == 1
    assert handled_texts(tmp_path) == [f"n{i}" for i in range(10)]


# Claim requests include the heartbeat's renewals while a handler runs, hence ranges.
@pytest.mark.parametrize(("handler", "n", "fewest_claims", "most_claims"), [
    ("record", 40, 1, 8),          # quick: runs of up to 32 events per claim
    ("record_slowly", 8, 7, 16),   # slow: each event claimed alone, the rest left to others
])
async def test_a_backlog_is_claimed_in_runs_while_handlers_are_quick(
        pair, gateway, tmp_path, handler, n, fewest_claims, most_claims):
    """Events queued before the daemon starts: while its handler is quick it claims
    a run of them at once (a handful of claim requests, not one per event); a slow
    handler claims each alone. Every event is handled, in order."""
    a_h, b_h = pair
    await skip_backlog(gateway, b_h)
    port = int(gateway.rsplit(":", 1)[1])
    async with MeshClient(gateway, api_key=a_h.api_key) as sender:
        for i in range(n):
            await sender.send(b_h.agent_id, f"b{i}")
    async with Proxy(port) as proxy, Probe(tmp_path / "p.sock") as probe:
        async with running(record_daemon(proxy.url, b_h, tmp_path, probe,
                                         handler=f"tests.meshd.sample_handlers:{handler}")):
            await probe.wait_for(n)
        claims = proxy.requests["/v1/mesh/inbox/claim"]
    assert fewest_claims <= claims <= most_claims, f"{claims} claim requests for {n} events"
    assert handled_texts(tmp_path) == [f"b{i}" for i in range(n)]


async def test_gateway_killed_and_restarted_nothing_lost(pair, gateway, migrated, tmp_path):
    a_h, b_h = pair
    await skip_backlog(gateway, b_h)
    gw = GatewayProc(migrated)
    await gw.start()
    async with Probe(tmp_path / "p.sock") as probe, \
            serving(gw, record_daemon(gw.url, b_h, tmp_path, probe)) as d:
        # messages go in through the session's gateway; the daemon's gateway is gw
        async with MeshClient(gateway, api_key=a_h.api_key) as sender:
            for i in range(5):
                await sender.send(b_h.agent_id, f"r{i}")
            await probe.wait_for(5)
            mark = len(d.lines)
            await gw.kill()  # kill -9: the stream breaks mid-flight
            await d.wait_log("SSE unavailable|gateway unreachable", after=mark)
            for i in range(5, 15):
                await sender.send(b_h.agent_id, f"r{i}")  # while it is down
            await gw.start()  # same port
            await probe.wait_for(15)
            await d.wait_log(SSE, after=mark)  # back on SSE
            for i in range(15, 20):
                await sender.send(b_h.agent_id, f"r{i}")
            await probe.wait_for(20)
        modes = [line for line in d.lines[mark:] if "inbox:" in line]
        assert SSE in modes[-1] and any("long-polling" in m or "unreachable" in m for m in modes)
    assert handled_texts(tmp_path) == [f"r{i}" for i in range(20)]


async def test_a_run_that_ends_while_the_gateway_is_down_is_reported_when_it_is_back(
        world, pair, gateway, migrated, tmp_path):
    a_h, b_h = pair
    await skip_backlog(gateway, b_h)
    gw = GatewayProc(migrated)
    await gw.start()
    release = tmp_path / "release"
    os.mkfifo(release)
    async with Probe(tmp_path / "p.sock") as probe:
        env = mesh_env(gw.url, b_h.api_key, tmp_path, TEST_OUT=str(tmp_path / "out"),
                       TEST_PROBE=str(probe.path), TEST_RELEASE=str(release))
        argv = mesh_cmd("daemon", "--exec", f"{sys.executable} {REPO / 'tests/meshd/exec_handler.py'}",
                        "--state-dir", str(tmp_path / "state"), *FAST)
        async with serving(gw, Proc(argv, env, name="daemon")) as d, \
                MeshClient(gateway, api_key=a_h.api_key) as sender:
            held = await sender.send(b_h.agent_id, "wait")
            await probe.wait_for(1, prefix="started ")  # its start is at the gateway
            await gw.kill()
            fd = os.open(release, os.O_WRONLY | os.O_NONBLOCK)  # the command finishes
            os.close(fd)
            await d.wait_log("run report kept for later")
            after = await sender.send(b_h.agent_id, "next")  # while it is down
            await gw.start()
            await probe.wait_for(2, prefix="done ")
            at_gateway = await gateway_runs(world.bob, b_h.agent_id, settled=2)
            assert [(r["task_id"], r["outcome"], r["exit_status"]) for r in at_gateway] == [
                (held.task_id, "ok", 0), (after.task_id, "ok", 0)]
            assert (await sender.get_task(held.task_id)).messages[-1].text == "re: wait"


async def test_token_expiry_mid_stream(pair, gateway, migrated, tmp_path):
    a_h, b_h = pair
    await skip_backlog(gateway, b_h)
    gw = GatewayProc(migrated, agent_token_ttl_seconds=3)
    await gw.start()
    async with Probe(tmp_path / "p.sock") as probe, \
            serving(gw, record_daemon(gw.url, b_h, tmp_path, probe, "--heartbeat", "1")) as d:
        async with MeshClient(gateway, api_key=a_h.api_key) as sender:
            for i in range(3):
                await sender.send(b_h.agent_id, f"t{i}")
            await probe.wait_for(3)
            # two renewals: the token the stream was opened with has expired by now
            first = await d.wait_log("token renewed")
            await d.wait_log("token renewed", after=d.lines.index(first) + 1)
            for i in range(3, 6):
                await sender.send(b_h.agent_id, f"t{i}")
            await probe.wait_for(6)
        async with MeshClient(gw.url, api_key=b_h.api_key) as c:
            assert (await c.me())["status"] == "active"  # heartbeats kept going
        assert d.count("heartbeat failed") == 0
    assert handled_texts(tmp_path) == [f"t{i}" for i in range(6)]

"""One agent read by a ``mesh daemon`` (a real process) and two remote MCP
clients (the official client over Streamable HTTP) at the same time: each event is
handled by exactly one of them (ADR 050). Counted by seq over the daemon's
handler file and what the clients' ``mesh_check_inbox`` returned."""

from __future__ import annotations

import asyncio
from typing import Any

from mcp import ClientSession

from meshd import MeshClient
from tests.api_helpers import until
from tests.meshd.support import Probe
from tests.meshd.test_daemon_gateway import daemon, lines, skip_backlog, stop
from tests.test_mcp_remote import call, session


async def test_a_daemon_and_two_remote_clients_never_handle_one_event_twice(
        pair, gateway, tmp_path):
    a_h, b_h = pair
    first, more = 5, 60
    await skip_backlog(gateway, b_h)
    out = tmp_path / "daemon.out"
    taken: dict[str, list[dict[str, Any]]] = {"one": [], "two": []}

    def daemon_jobs() -> list[list[str]]:
        return [x for x in lines(out) if x[2] == "task.created"]

    def handled() -> int:
        remote = sum(e["type"] == "task.created" for e in taken["one"] + taken["two"])
        return len(daemon_jobs()) + remote

    async def drain(name: str, s: ClientSession, done: asyncio.Event) -> None:
        while not done.is_set():
            got, err = await call(s, "mesh_check_inbox", wait_seconds=1, limit=3)
            assert err is None, err
            taken[name] += got["events"]

    async with Probe(tmp_path / "p.sock") as probe:
        proc = daemon(gateway, b_h, tmp_path, "B", "--handler", "tests.meshd.sample_handlers:record",
                      TEST_OUT=str(out), TEST_PROBE=str(probe.path))
        try:
            await proc.start()
            await proc.wait_log("following the SSE stream")
            async with MeshClient(gateway, api_key=a_h.api_key) as sender:
                for i in range(first):  # the daemon alone
                    await sender.send(b_h.agent_id, f"job-{i}")
                await probe.wait_for(first, prefix="B ")
                async with session(gateway, b_h.api_key) as one, \
                        session(gateway, b_h.api_key, "discover") as two:
                    done = asyncio.Event()
                    readers = [asyncio.create_task(drain("one", one, done)),
                               asyncio.create_task(drain("two", two, done))]
                    for i in range(first, first + more):  # all three at once
                        await sender.send(b_h.agent_id, f"job-{i}")
                    await until(lambda: asyncio.sleep(0, handled() >= first + more))
                    done.set()
                    await asyncio.gather(*readers)
            assert await stop(proc) == 0
        finally:
            await proc.stop()

    by_daemon = {int(seq): text for seq, _event_id, _type, text in daemon_jobs()}
    remote = [(e["seq"], e.get("text")) for e in taken["one"] + taken["two"]
              if e["type"] == "task.created"]
    by_remote = dict(remote)
    seqs = [e["seq"] for e in taken["one"] + taken["two"]]
    assert len(seqs) == len(set(seqs))  # neither client got one twice
    assert len(by_daemon) == len(daemon_jobs())  # the daemon ran none twice
    assert not by_daemon.keys() & by_remote.keys()  # and none ran on two readers
    texts = sorted([*by_daemon.values(), *by_remote.values()])
    assert texts == sorted(f"job-{i}" for i in range(first + more))  # every job, once
    assert by_remote, "the remote clients took no event: the race was not run"
    async with MeshClient(gateway, api_key=b_h.api_key) as c:
        me = await c.me()
    assert me["acked_seq"] == me["inbox_seq"]

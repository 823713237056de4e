"""Scenario: one ``mesh daemon`` drains a backlog, and what each event costs.

``n`` messages are queued for an agent that no runtime reads; then ``mesh daemon
--handler bench.daemon_handler:noop --no-reply`` starts with a fresh state
folder. The drain is timed from the first event the daemon acks to the last
(its start-up is left out), with the CPU of the daemon, the mesh processes and
the services metered over the same window: what the runtime's own round trips
per event cost (ADR 050: a claim before each handler, acks after).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from bench.client import Client, now
from bench.cpu import Interval, Measure
from bench.env import Env
from bench.load import Agent, new_message_id, send
from bench.scenarios.daemon import end, start_daemon
from bench.topology import Topology

DAEMON = "daemon"
POLL_SECONDS = 0.005


@dataclass
class DrainRun:
    ran: bool
    reason: str = ""
    events: int = 0          # acked during the timed window
    seconds: float = float("nan")
    cpu: Interval | None = None

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("nan")


async def _queue(base_url: str, sender: Agent, to: str, n: int) -> int:
    """Send ``n`` messages to ``to``, 16 at a time; how many were accepted."""
    client = Client(base_url)
    accepted = 0
    try:
        for start in range(0, n, 16):
            answers = await asyncio.gather(*(send(client, sender, to, new_message_id())
                                             for _ in range(min(16, n - start))))
            accepted += sum(r.status == 201 for r in answers)
    finally:
        client.close()
    return accepted


async def _cursor(conn: asyncpg.Connection, agent_id: str) -> tuple[int, int]:
    row = await conn.fetchrow("SELECT acked_seq, inbox_seq FROM agents WHERE agent_id = $1",
                              agent_id)
    return int(row["acked_seq"]), int(row["inbox_seq"])


async def run(env: Env, topo: Topology, sender: Agent, agent: Agent, *, n: int,
              timeout: float = 120.0) -> DrainRun:
    base_url = topo.web.url
    if await _queue(base_url, sender, agent.agent_id, n) != n:
        return DrainRun(False, "not every queued send was accepted")
    state_dir = Path(tempfile.mkdtemp(prefix="mesh-bench-drain-"))
    log_path = state_dir / "daemon.log"
    conn = await asyncpg.connect(env.settings.database_url)
    daemon: asyncio.subprocess.Process | None = None
    try:
        acked0, target = await _cursor(conn, agent.agent_id)
        with open(log_path, "wb") as log:  # noqa: ASYNC230 (before the timed window)
            daemon = await start_daemon(base_url, agent.api_key, state_dir / "state", log,
                                        "--handler", "bench.daemon_handler:noop")
        deadline = now() + timeout
        acked = acked0
        while acked == acked0:  # start-up: not timed
            if daemon.returncode is not None or now() > deadline:
                return DrainRun(False, f"the daemon handled nothing: {log_path.read_text()[-500:]}")
            await asyncio.sleep(POLL_SECONDS)
            acked, _ = await _cursor(conn, agent.agent_id)
        first = acked
        measure = Measure(env.meter(topo.named(), {DAEMON: daemon.pid}))
        t0 = now()
        with measure:
            while acked < target:
                if daemon.returncode is not None or now() > deadline:
                    return DrainRun(False, f"the drain stopped at {acked} of {target}: "
                                           f"{log_path.read_text()[-500:]}")
                await asyncio.sleep(POLL_SECONDS)
                acked, _ = await _cursor(conn, agent.agent_id)
        return DrainRun(True, "", acked - first, now() - t0, measure.result)
    finally:
        await conn.close()
        if daemon is not None:
            await end(daemon)
        shutil.rmtree(state_dir, ignore_errors=True)

"""Scenario 6: the agent-side daemon's idle memory.

``mesh daemon --exec cat`` (the console script's code, ``python -m meshd.cli``)
for one agent, against the bench's web process. RSS is read after it has been
connected and idle for ``idle`` s, and again after it handled one message
(``cat`` runs, the event is acked) and idled once more. Baseline: a bare
Python interpreter of the same venv (``python -c 'sleep'``), the floor any
Python daemon starts from.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import asyncpg
import psutil

from bench.client import Client, now
from bench.load import Agent, new_message_id, send
from tests.support.procs import REPO


@dataclass
class DaemonRun:
    ran: bool
    reason: str = ""
    rss_idle_kb: int = 0
    rss_after_event_kb: int = 0
    bare_python_kb: int = 0
    handled_seconds: float = float("nan")


async def start_daemon(base_url: str, api_key: str, state_dir: Path, log: IO[bytes],
                       *handler: str) -> asyncio.subprocess.Process:
    """``mesh daemon`` (the console script's code) for one agent, ``--no-reply``, with
    ``handler`` (e.g. ``--exec cat``), its state in ``state_dir``, its output in ``log``."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "meshd.cli", "daemon", "--url", base_url, "--api-key", api_key,
        *handler, "--no-reply", "--state-dir", str(state_dir), cwd=REPO, stdout=log,
        stderr=log, stdin=asyncio.subprocess.DEVNULL)


async def end(proc: asyncio.subprocess.Process) -> None:
    """Stop ``proc``: SIGTERM, then SIGKILL after 15 s."""
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(proc.wait(), 15)
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


async def _rss_when_settled(pid: int, seconds: float) -> int:
    await asyncio.sleep(seconds)
    return int(psutil.Process(pid).memory_info().rss // 1024)


async def run(base_url: str, database_url: str, sender: Agent, agent: Agent, *,
              idle: float) -> DaemonRun:
    if not any((REPO / "meshd" / where).exists() for where in ("daemon.py", "daemon/service.py")):
        return DaemonRun(False, "this commit has no meshd daemon")
    state_dir = Path(tempfile.mkdtemp(prefix="mesh-bench-meshd-"))
    log_path = state_dir / "daemon.log"
    with open(log_path, "wb") as log:  # noqa: ASYNC230 (before any load runs)
        daemon = await start_daemon(base_url, agent.api_key, state_dir / "state", log,
                                    "--exec", "cat")
    bare = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(120)", stdin=asyncio.subprocess.DEVNULL)
    conn = await asyncpg.connect(database_url)
    try:
        await asyncio.sleep(1.0)
        if daemon.returncode is not None:
            return DaemonRun(False, f"mesh daemon exited with {daemon.returncode}: "
                                    f"{log_path.read_text()[-500:]}")
        rss_idle = await _rss_when_settled(daemon.pid, idle)
        bare_kb = int(psutil.Process(bare.pid).memory_info().rss // 1024)
        client = Client(base_url)
        t0 = now()
        resp = await send(client, sender, agent.agent_id, new_message_id())
        client.close()
        handled = float("nan")
        if resp.status == 201:
            seq = resp.json()["message"].get("inbox_seq")
            deadline = now() + 20
            while now() < deadline:
                acked = await conn.fetchval("SELECT acked_seq FROM agents WHERE agent_id = $1",
                                            agent.agent_id)
                inbox = await conn.fetchval("SELECT inbox_seq FROM agents WHERE agent_id = $1",
                                            agent.agent_id)
                if acked >= (seq or inbox):
                    handled = now() - t0
                    break
                await asyncio.sleep(0.05)
        rss_after = await _rss_when_settled(daemon.pid, idle)
        if daemon.returncode is not None:
            return DaemonRun(False, f"mesh daemon exited with {daemon.returncode}: "
                                    f"{log_path.read_text()[-500:]}")
        return DaemonRun(True, "", rss_idle, rss_after, bare_kb, handled)
    finally:
        await conn.close()
        for p in (daemon, bare):
            await end(p)
        shutil.rmtree(state_dir, ignore_errors=True)

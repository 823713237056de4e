"""The agent runtime's own overhead: ``python bench/agent_runtime.py [--events N]``.

Starts the embedded services and the real web/outbox/push processes (as
``bench/run.py`` does), one ``mesh agent`` against the scripted model stand-in
(tests/support/model_server.py; it answers at once, so the model's thinking time
is zero), and sends it N tasks one after the other. Measures, per event:

- **wake-up**: the send's 201 → the runtime's first model request (target p50 ≤ 1 s);
- **CPU**: of the runtime process itself and of the Claude Code CLI it starts, per event;
- **RSS**: of the runtime process, idle after the runs, and the CLI's peak.

Baseline, same run: ``mesh daemon --exec`` with a one-line handler, the send's
201 → that handler started (the floor: delivery plus a process start). Prints a
markdown report; nothing is asserted (reported, never tested).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from bench.env import started  # noqa: E402
from bench.load import make_cast  # noqa: E402
from tests.support.meshapi import MeshFactory  # noqa: E402
from tests.support.model_server import ModelServer, Reply  # noqa: E402


def _pcts(values: list[float]) -> str:
    if not values:
        return "no samples"
    ms = sorted(v * 1000 for v in values)
    p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    return f"p50 {p(0.5):.0f} ms, p90 {p(0.9):.0f} ms, max {ms[-1]:.0f} ms (n={len(ms)})"


async def _send(http: MeshFactory, headers: dict[str, str], to: str, text: str) -> tuple[str, float]:
    resp = await http.http.post("/v1/mesh/tasks", headers=headers, json={
        "to_agent_id": to, "message": {"parts": [{"kind": "text", "text": text}]}})
    assert resp.status_code == 201, resp.text
    return resp.json()["task_id"], time.time()


async def _agent_events(url: str, events: int, tmp: Path) -> tuple[list[float], dict[str, float]]:
    cast = await make_cast(url, 1, 1)
    sender, agent = cast.senders[0], cast.recipients[0]
    cpu = {"runtime_s": 0.0, "cli_s": 0.0, "cli_rss_peak_kb": 0.0, "runtime_rss_kb": 0.0}
    waits: list[float] = []
    with ModelServer(lambda req: Reply(text="ok")) as model:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
        env.update(model.env(str(tmp / "home")), PYTHONPATH=str(REPO), MESH_URL=url,
                   MESH_API_KEY=agent.api_key)
        (tmp / "home").mkdir(exist_ok=True)
        log = (tmp / "agent.log").open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "meshd.cli", "agent", "--state-dir", str(tmp / "state"),
            cwd=REPO, env=env, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL)
        ps = psutil.Process(proc.pid)
        seen_cli: dict[int, psutil.Process] = {}
        try:
            await asyncio.sleep(3)  # connected and idle before the clock starts
            base = ps.cpu_times()
            async with MeshFactory.connect(url) as http:
                for i in range(events):
                    before = len(model.agent_turns())
                    _, sent = await _send(http, sender.headers, agent.agent_id, f"task {i}")
                    turns = await model.wait_turns(before + 1, timeout=60)
                    waits.append(turns[before].arrived - sent)
                    # let the run finish (its auto-reply), sampling the CLI while it lives
                    deadline = time.monotonic() + 60
                    while time.monotonic() < deadline:
                        kids = ps.children(recursive=True)
                        for k in kids:
                            seen_cli[k.pid] = k
                            with contextlib.suppress(psutil.Error):
                                cpu["cli_rss_peak_kb"] = max(cpu["cli_rss_peak_kb"],
                                                             k.memory_info().rss / 1024)
                        if not kids and (tmp / "state" / "runs.jsonl").exists() and \
                                len((tmp / "state" / "runs.jsonl").read_text().splitlines()) > i:
                            break
                        await asyncio.sleep(0.05)
            after = ps.cpu_times()
            cpu["runtime_s"] = (after.user - base.user) + (after.system - base.system)
            cpu["cli_s"] = (after.children_user - base.children_user) + \
                (after.children_system - base.children_system)
            cpu["runtime_rss_kb"] = ps.memory_info().rss / 1024
        finally:
            proc.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 20)
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            log.close()
    return waits, cpu


async def _baseline(url: str, events: int, tmp: Path) -> list[float]:
    cast = await make_cast(url, 1, 1)
    sender, agent = cast.senders[0], cast.recipients[0]
    stamps = tmp / "stamps"
    handler = f"{sys.executable} -c \"import time; open('{stamps}', 'a').write(repr(time.time()) + chr(10))\""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    env.update(PYTHONPATH=str(REPO), MESH_URL=url, MESH_API_KEY=agent.api_key)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "meshd.cli", "daemon", "--no-reply", "--state-dir", str(tmp / "bstate"),
        "--exec", handler, cwd=REPO, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    waits: list[float] = []
    try:
        await asyncio.sleep(3)
        async with MeshFactory.connect(url) as http:
            for i in range(events):
                _, sent = await _send(http, sender.headers, agent.agent_id, f"task {i}")
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    lines = stamps.read_text().splitlines() if stamps.exists() else []
                    if len(lines) > i:
                        waits.append(float(lines[i]) - sent)
                        break
                    await asyncio.sleep(0.01)
    finally:
        proc.terminate()
        await proc.wait()
    return waits


async def main(events: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="mesh-bench-agent-"))
    async with started() as env:
        for kind in ("web", "outbox", "push"):
            await env.process(kind)
        url = env.procs[0].url
        waits, cpu = await _agent_events(url, events, tmp)
        base = await _baseline(url, events, tmp)
    print("## mesh agent: the runtime's overhead (scripted model, zero thinking time)\n")
    print(f"- wake-up (send 201 → first model request): {_pcts(waits)}  (target p50 ≤ 1 s)")
    print(f"- baseline (send 201 → `mesh daemon --exec` handler started): {_pcts(base)}")
    if waits and base:
        print(f"- ratio of medians: {statistics.median(waits) / statistics.median(base):.1f}×")
    n = max(1, len(waits))
    print(f"- CPU per event: runtime {cpu['runtime_s'] / n * 1000:.0f} ms, "
          f"Claude Code CLI {cpu['cli_s'] / n * 1000:.0f} ms")
    print(f"- RSS: runtime {cpu['runtime_rss_kb'] / 1024:.0f} MB after the runs; "
          f"CLI peak {cpu['cli_rss_peak_kb'] / 1024:.0f} MB")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10)
    asyncio.run(main(ap.parse_args().events))

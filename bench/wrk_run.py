"""Run ``wrk`` with :file:`bench/wrk/send.lua` and read what it says.

wrk (a C load generator, from Debian) drives the gateway from outside the mesh's
code, as any HTTP client would: its CPU is not the mesh's, and no Python client's
scheduling sits between the two.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from bench.cpu import CpuMeter, Interval, run_command

SCRIPT = Path(__file__).resolve().parent / "wrk" / "send.lua"
RESULT_PREFIX = "WRK_RESULT "


@dataclass(frozen=True)
class WrkRun:
    connections: int
    seconds: float          # as wrk measured its run
    requests: int
    created: int            # 201s
    refused: int            # any other status
    socket_errors: int      # connect/read/write errors and timeouts
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    client_cpu: float       # CPU seconds of wrk itself
    cpu: Interval | None    # the stack's CPU over the run

    @property
    def rate(self) -> float:
        """Sends accepted (201) per second."""
        return self.created / self.seconds if self.seconds else 0.0


def binary() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    return path


def parse(output: str, connections: int, client_cpu: float = 0.0,
          cpu: Interval | None = None) -> WrkRun:
    """The run, from the ``WRK_RESULT`` line the script's ``done`` prints."""
    line = next((ln for ln in output.splitlines() if ln.startswith(RESULT_PREFIX)), None)
    if line is None:
        raise RuntimeError(f"wrk printed no {RESULT_PREFIX.strip()} line:\n{output[-2000:]}")
    r = json.loads(line[len(RESULT_PREFIX):])
    return WrkRun(
        connections=connections, seconds=r["duration_us"] / 1e6, requests=r["requests"],
        created=r["created"], refused=r["refused"],
        socket_errors=r["connect_errors"] + r["read_errors"] + r["write_errors"] + r["timeouts"],
        p50_ms=r["p50_us"] / 1000, p90_ms=r["p90_us"] / 1000, p99_ms=r["p99_us"] / 1000,
        p999_ms=r["p999_us"] / 1000, max_ms=r["max_us"] / 1000, client_cpu=client_cpu, cpu=cpu)


async def run(base_url: str, cast_file: Path, run_id: str, *, connections: int, seconds: float,
              threads: int = 2, meter: CpuMeter | None = None) -> WrkRun:
    """One closed-loop run: ``connections`` connections, each sending as soon as its
    previous send was answered. ``run_id`` goes into every message id."""
    cmd = [binary(), f"-t{min(threads, connections)}", f"-c{connections}",
           f"-d{max(1, round(seconds))}s", "--timeout", "10s", "-s", str(SCRIPT), base_url]
    env = {"MESH_CAST": str(cast_file), "MESH_RUN": run_id, "PATH": "/usr/bin:/bin"}
    done = await run_command(cmd, "wrk", meter=meter, env=env)
    return parse(done.output, connections, done.client_cpu, done.cpu)

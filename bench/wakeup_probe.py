"""What one wake-up costs on this host right now, measured beside a run.

At a trickle the mesh's CPU per send is mostly wake-ups: a process sleeps in its
event loop, a socket wakes it, it does a little and sleeps again, some twenty times
per send across the processes. On this shared virtual machine the price of that
moves from run to run: five latency runs of one commit read 2.76–4.83 CPU-ms per
send, every process together (Redis, doing the same twelve commands per send,
0.16–0.23 ms), while a pure-CPU loop beside them stayed within 3 %.

The probe does what the mesh does, on a small scale: two processes pass a 300-byte
message over a socket pair every few milliseconds, each blocked in ``recv`` in
between, and every second it prints their on-CPU time per exchange (from
``/proc/<pid>/schedstat``, nanoseconds). A run's CPU per send set against the
probe's median in the same window compares across runs in a way the raw figure
does not. The probe's own CPU (under 1 % of a core) counts as another process's.

Run: ``python -m bench.wakeup_probe [--gap-ms 5]`` prints ``<unix time> <µs>`` lines
until stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

MESSAGE = b"x" * 300
REPO = Path(__file__).resolve().parents[1]


def on_cpu_ns(pid: int) -> int:
    """Nanoseconds ``pid`` has run (the first field of its schedstat)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def _echo(sock: socket.socket) -> None:
    while True:
        message = sock.recv(4096)
        if not message:
            os._exit(0)
        sock.send(message)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gap-ms", type=float, default=5.0, help="sleep between exchanges")
    p.add_argument("--window", type=float, default=1.0, help="seconds per printed sample")
    args = p.parse_args()
    ours, theirs = socket.socketpair()
    child = os.fork()
    if child == 0:
        ours.close()
        _echo(theirs)
    theirs.close()
    me = os.getpid()
    gap = args.gap_ms / 1000
    while True:
        before = on_cpu_ns(me) + on_cpu_ns(child)
        exchanges = 0
        end = time.monotonic() + args.window
        while time.monotonic() < end:
            ours.send(MESSAGE)
            ours.recv(4096)
            exchanges += 1
            # The gap is also where a closed stdin (the bench is done) is noticed.
            if select.select([sys.stdin], [], [], gap)[0] and not sys.stdin.read(1):
                ours.close()
                return
        after = on_cpu_ns(me) + on_cpu_ns(child)
        print(f"{time.time():.3f} {(after - before) / exchanges / 1000:.2f}", flush=True)


@dataclass
class Samples:
    """(unix time, µs per exchange) as the probe printed them."""

    points: list[tuple[float, float]] = field(default_factory=list)

    def add_line(self, line: str) -> None:
        at, _, micros = line.strip().partition(" ")
        try:
            self.points.append((float(at), float(micros)))
        except ValueError:
            pass  # not a sample (an interpreter warning on stderr merged in)

    def median(self, start: float, end: float) -> float | None:
        """The median µs per exchange of the samples taken in [start, end]."""
        inside = [micros for at, micros in self.points if start <= at <= end]
        return statistics.median(inside) if inside else None


class WakeupProbe:
    """``async with WakeupProbe() as probe: ...; probe.samples.median(t0, t1)``"""

    def __init__(self, gap_ms: float = 5.0) -> None:
        self.gap_ms = gap_ms
        self.samples = Samples()
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._sampled = asyncio.Event()  # the first sample came, or the probe ended

    async def __aenter__(self) -> WakeupProbe:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.wakeup_probe", "--gap-ms", str(self.gap_ms),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            cwd=REPO)
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        try:
            async for line in self._proc.stdout:
                self.samples.add_line(line.decode())
                if self.samples.points:
                    self._sampled.set()
        finally:
            self._sampled.set()

    async def first_sample(self) -> None:
        """Until the probe has measured its first window."""
        await self._sampled.wait()
        if not self.samples.points:
            raise RuntimeError("the wake-up probe ended before its first sample")

    async def __aexit__(self, *exc: object) -> None:
        if self._proc is None:
            return
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            await asyncio.wait_for(self._proc.wait(), 10)
        except TimeoutError:
            self._proc.kill()
            await self._proc.wait()
        if self._reader is not None:
            await self._reader


if __name__ == "__main__":
    main()

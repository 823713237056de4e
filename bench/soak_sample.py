"""RSS and open files of every mesh process over a soak, and the "flat" verdict.

A process killed by a fault comes back with a new pid; its figures are judged
from its last start. Flat means: after the warm-up, the end figure is within the
tolerance of the start figure — RSS +10 % + 16 MiB; open files other than TCP
connections +16; outbound TCP connections (Postgres, Redis, bus) +64, since the
connection pools grow to the load's peak concurrency (64 requests in flight plus
the readers) after an outage's backlog, but a connection leaked per request or
reconnect would pass that within minutes. Inbound client connections are the load
client's choice (keep-alive pool, readers offline) and are only reported.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import psutil

from tests.support.faults import Procs
from tests.support.procs import MeshProcess

RSS_GROWTH = 0.10
RSS_SLACK = 16 * 2**20
FD_SLACK = 16
OUTBOUND_SLACK = 64


@dataclass
class Sample:
    t: float
    pid: int
    rss: int
    fds: int  # open files other than TCP connections
    clients: int  # inbound TCP connections (web processes)
    outbound: int  # TCP connections this process opened


@dataclass
class Judged:
    slot: str
    starts: int  # pids seen (1 + restarts)
    start: Sample | None
    end: Sample | None
    rss_max: int
    fds_max: int
    outbound_max: int
    verdict: str

    @property
    def flat(self) -> bool:
        return self.verdict == "flat"


def measure(pid: int, port: int | None) -> tuple[int, int, int, int]:
    """RSS, open files other than TCP connections, inbound connections on ``port`` and
    outbound TCP connections of a process and its children."""
    proc = psutil.Process(pid)
    rss = fds = clients = outbound = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            rss += p.memory_info().rss
            fds += p.num_fds()
            for c in p.net_connections(kind="tcp"):
                if not c.raddr:
                    continue  # a listening socket: an ordinary open file
                if port is not None and c.laddr and c.laddr.port == port:
                    clients += 1
                else:
                    outbound += 1
        except psutil.NoSuchProcess:
            continue
    return rss, fds - clients - outbound, clients, outbound


@dataclass
class Sampler:
    procs: Procs
    every: float
    t0: float = field(default_factory=time.monotonic)
    series: dict[str, list[Sample]] = field(default_factory=dict)

    def slots(self) -> dict[str, MeshProcess]:
        out: dict[str, MeshProcess] = {}
        for kind, group in (("web", self.procs.webs), ("outbox", self.procs.outboxes),
                            ("push", self.procs.pushes), ("cron", self.procs.crons)):
            for i, proc in enumerate(group, 1):
                out[f"{kind}#{i}"] = proc
        return out

    async def sample(self) -> None:
        now = time.monotonic() - self.t0
        for name, proc in self.slots().items():
            if proc.proc is None or proc.proc.poll() is not None:
                continue  # killed by a fault, not restarted yet
            try:
                rss, fds, clients, outbound = await asyncio.to_thread(
                    measure, proc.proc.pid, proc.port if proc.kind == "web" else None)
            except psutil.Error:
                continue
            self.series.setdefault(name, []).append(
                Sample(now, proc.proc.pid, rss, fds, clients, outbound))

    async def run(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(self.every)

    def judge(self, warmup: float) -> list[Judged]:
        """Per slot: the first sample ``warmup`` s after its last start against the last one."""
        out = []
        for name, samples in self.series.items():
            last_pid = samples[-1].pid
            life = [s for s in samples if s.pid == last_pid]
            settled = [s for s in life if s.t >= life[0].t + warmup]
            pids = len({s.pid for s in samples})
            rss_max = max(s.rss for s in life)
            fds_max = max(s.fds for s in life)
            outbound_max = max(s.outbound for s in life)
            if len(settled) < 2:
                out.append(Judged(name, pids, life[0], life[-1], rss_max, fds_max, outbound_max,
                                  f"not judged (last start {life[0].t:.0f} s, under the "
                                  f"{warmup:g} s warm-up before the end)"))
                continue
            start, end = settled[0], settled[-1]
            grew = []
            if end.rss > start.rss * (1 + RSS_GROWTH) + RSS_SLACK:
                grew.append("RSS")
            if end.fds > start.fds + FD_SLACK:
                grew.append("open files")
            if end.outbound > start.outbound + OUTBOUND_SLACK:
                grew.append("outbound connections")
            out.append(Judged(name, pids, start, end, rss_max, fds_max, outbound_max,
                              "flat" if not grew else "grew: " + ", ".join(grew)))
        return out

"""Where the CPU goes: CPU seconds per component over an interval, and how long
each waited for a CPU.

Other engineers' test suites share the two cores, so wall-clock throughput
says as much about them as about us. CPU time spent per request is much less
sensitive to that, and "run-queue wait" (``/proc/PID/task/*/schedstat``, the
time a runnable thread waited for a core) tells a process that is slow
because it is starved from one that is slow because it waits on I/O. The same
file counts the times each thread was put on a CPU: at a trickle nearly every one
is a wake-up, which the mesh's design decides, while what each costs moves with
the host (bench/results/2026-12-06-cpu-noise-probes.md).

A component is a root pid plus its descendants; CPU of children that already
exited is included (``children_user``/``children_system`` of their parent).
"""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True)
class Usage:
    cpu: float      # seconds on a CPU
    wait: float     # seconds runnable but waiting for a CPU (living threads only)
    runs: int = 0   # times a thread was put on a CPU (living threads only)
    # of those, times it had been taken off a CPU while it could still run
    # (involuntary context switches: preempted, not woken)
    preempted: int = 0


def _sched(proc: psutil.Process) -> tuple[float, int, int]:
    """(seconds runnable on a run queue, times put on a CPU, times preempted), over
    the living threads.

    psutil has no run-queue wait: cpu_times() is time *on* a CPU and
    num_ctx_switches() reads the main thread only, while a broker's work hops
    between its threads. So psutil lists the threads and the kernel gives the rest:
    schedstat's second field (nanoseconds spent runnable on a run queue) and third
    (the times the thread ran), and the status file's involuntary switches. A run
    after a preemption resumes work already under way, so it costs a context
    switch, not another pass through the program: the table shows the two apart."""
    wait = runs = preempted = 0
    for thread in proc.threads():
        task = f"/proc/{proc.pid}/task/{thread.id}"
        try:
            with open(f"{task}/schedstat") as f:
                fields = f.read().split()
            with open(f"{task}/status") as f:
                involuntary = next(int(line.split()[1]) for line in f
                                   if line.startswith("nonvoluntary_ctxt_switches"))
            wait, runs = wait + int(fields[1]), runs + int(fields[2])
            preempted += involuntary
        except (OSError, ValueError, IndexError, StopIteration):
            continue  # the thread ended meanwhile, or no schedstats in this kernel
    return wait / 1e9, runs, preempted


def _usage(pid: int, *, with_children: bool = True) -> Usage:
    try:
        root = psutil.Process(pid)
        procs = [root, *(root.children(recursive=True) if with_children else [])]
    except psutil.NoSuchProcess:
        return Usage(0.0, 0.0)
    cpu = wait = 0.0
    runs = preempted = 0
    for p in procs:
        try:
            t = p.cpu_times()
            cpu += t.user + t.system
            if with_children:
                cpu += t.children_user + t.children_system
            waited, ran, taken = _sched(p)
            wait, runs, preempted = wait + waited, runs + ran, preempted + taken
        except psutil.NoSuchProcess:
            continue
    return Usage(cpu, wait, runs, preempted)


class CpuMeter:
    """``start()`` then ``stop()`` → CPU and wait seconds per component in between."""

    def __init__(self, components: dict[str, tuple[int, bool]]) -> None:
        # name → (root pid, include descendants)
        self.components = {k: v for k, v in components.items() if v[0]}
        self._start: dict[str, Usage] = {}

    def start(self) -> None:
        self._start = {k: _usage(pid, with_children=kids)
                       for k, (pid, kids) in self.components.items()}

    def stop(self) -> dict[str, Usage]:
        out = {}
        for k, (pid, kids) in self.components.items():
            end = _usage(pid, with_children=kids)
            begin = self._start.get(k, Usage(0.0, 0.0))
            out[k] = Usage(max(0.0, end.cpu - begin.cpu), max(0.0, end.wait - begin.wait),
                           max(0, end.runs - begin.runs),
                           max(0, end.preempted - begin.preempted))
        return out


def machine_busy() -> tuple[float, float]:
    """(user+system seconds of all CPUs, idle seconds of all CPUs) since boot."""
    t = psutil.cpu_times()
    return t.user + t.system + t.nice + t.irq + t.softirq + t.steal, t.idle + t.iowait


# The bench's own process in every meter: it drives the load, it is not the pipeline.
LOAD_CLIENT = "load client"


@dataclass(frozen=True)
class Interval:
    wall: float
    usage: dict[str, Usage]
    machine_busy: float     # CPU seconds used by everything on the machine
    machine_idle: float

    @property
    def ours(self) -> float:
        return sum(u.cpu for u in self.usage.values())

    @property
    def pipeline(self) -> float:
        """CPU seconds of the mesh processes and services: everything but the load client."""
        return self.ours - (self.usage[LOAD_CLIENT].cpu if LOAD_CLIENT in self.usage else 0.0)

    @property
    def others(self) -> float:
        """CPU seconds used by processes that are not part of this bench (other test runs)."""
        return max(0.0, self.machine_busy - self.ours)

    def per(self, n: int, name: str) -> float:
        """CPU milliseconds of component ``name`` per unit of work."""
        return 1000 * self.usage[name].cpu / n if n else float("nan")

    def runs_per(self, n: int, name: str) -> float:
        """Times component ``name``'s threads were put on a CPU, per unit of work."""
        return self.usage[name].runs / n if n else float("nan")

    def preempted_per(self, n: int, name: str) -> float:
        return self.usage[name].preempted / n if n else float("nan")

    def share(self, name: str) -> tuple[float, float]:
        """(% of one core used, % of wall time waiting for a core)."""
        u = self.usage[name]
        return 100 * u.cpu / self.wall, 100 * u.wait / self.wall


class Measure:
    """Context manager: ``with Measure(meter) as m: ...`` then ``m.result``."""

    def __init__(self, meter: CpuMeter) -> None:
        self.meter = meter
        self.result: Interval | None = None

    def __enter__(self) -> Measure:
        import time

        self._t0 = time.perf_counter()
        self._m0 = machine_busy()
        self.meter.start()
        return self

    def __exit__(self, *exc: object) -> None:
        import time

        usage = self.meter.stop()
        m1 = machine_busy()
        self.result = Interval(time.perf_counter() - self._t0, usage, m1[0] - self._m0[0],
                               m1[1] - self._m0[1])


@dataclass(frozen=True)
class CommandRun:
    """A load tool's run: its output, the tool's own CPU, the meter's interval."""

    output: str
    client_cpu: float            # CPU seconds of the command itself
    cpu: Interval | None         # what ``meter`` counted over the run


async def run_command(cmd: list[str], name: str, *, meter: CpuMeter | None = None,
                      cwd: Path | None = None, env: Mapping[str, str] | None = None) -> CommandRun:
    """Run a load tool (wrk, pgbench) to its end with ``meter`` measuring the
    processes under load meanwhile; the tool's CPU comes from the kernel's count for
    reaped children, so it is not in the meter's. A non-zero exit is an error
    carrying the tail of the output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    measure = Measure(meter) if meter is not None else None
    if measure is not None:
        measure.__enter__()
    proc = await asyncio.create_subprocess_exec(*cmd, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    if measure is not None:
        measure.__exit__(None, None, None)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed ({proc.returncode}):\n{text[-3000:]}")
    return CommandRun(text, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
                      measure.result if measure is not None else None)

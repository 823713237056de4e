"""The bench's CPU meter counts the times a process's threads ran: a child woken
fifty times by a ping-pong over pipes ran at least fifty times; a child that
shares one CPU with another busy process is preempted, and the meter tells those
runs apart; the table divides what it counted by the work done."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.cpu import CpuMeter, Interval, Usage

# Echoes each line back: every read blocks until the parent writes, so every
# line is one wake-up of the child.
_ECHO = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line); sys.stdout.flush()\n"


def _until_asleep(pid: int) -> None:
    with open(f"/proc/{pid}/stat") as stat:
        while stat.read().rsplit(")", 1)[1].split()[0] == "R":  # the state field
            stat.seek(0)


def test_a_child_woken_fifty_times_ran_at_least_fifty_times() -> None:
    child = subprocess.Popen([sys.executable, "-c", _ECHO], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, bufsize=1)
    assert child.stdin is not None and child.stdout is not None
    try:
        child.stdin.write("ready\n")
        assert child.stdout.readline() == "ready\n"  # started: its start-up is not counted
        meter = CpuMeter({"child": (child.pid, False)})
        meter.start()
        for i in range(50):
            # Asleep in its read first: a line already waiting when it comes back
            # from its write would be read in the same run.
            _until_asleep(child.pid)
            child.stdin.write(f"{i}\n")
            assert child.stdout.readline() == f"{i}\n"
        usage = meter.stop()["child"]
    finally:
        child.stdin.close()
        child.wait(5)
    # At least one run per wake-up; not thousands (a count of something else).
    assert 50 <= usage.runs < 5000


def test_runs_per_unit_of_work() -> None:
    cpu = Interval(1.0, {"web": Usage(0.2, 0.0, runs=560), "push": Usage(0.1, 0.0)}, 1.0, 1.0)
    assert cpu.runs_per(100, "web") == 5.6
    assert cpu.runs_per(100, "push") == 0.0


# Spins for the CPU time it is given, then reports: CPU work, never a wait.
_SPIN = ("import sys, time\nsys.stdin.readline()\nend = time.process_time() + float(sys.argv[1])\n"
         "while time.process_time() < end:\n    pass\nprint('done', flush=True)\n")


def test_a_child_sharing_one_cpu_with_another_spinner_is_preempted() -> None:
    """Two processes that never wait, on one CPU: the scheduler takes turns by
    preempting them, so the child's runs are mostly resumptions after a preemption.
    The count is of involuntary switches only: the ping-pong child above, which
    blocks on every line, is counted as waking, not as preempted."""
    cpu = os.sched_getaffinity(0)
    one = {min(cpu)}
    child = subprocess.Popen([sys.executable, "-c", _SPIN, "0.3"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    rival = subprocess.Popen([sys.executable, "-c", _SPIN, "30"], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, text=True)
    assert rival.stdin is not None
    try:
        os.sched_setaffinity(child.pid, one)
        os.sched_setaffinity(rival.pid, one)
        meter = CpuMeter({"child": (child.pid, False)})
        meter.start()
        rival.stdin.write("go\n")
        rival.stdin.flush()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "done\n"  # 0.3 s of CPU, shared with the rival
        usage = meter.stop()["child"]
    finally:
        rival.kill()
        rival.wait()
        child.kill()
        child.wait()
    assert usage.preempted >= 1
    assert usage.preempted <= usage.runs


def test_preemptions_per_unit_of_work() -> None:
    cpu = Interval(1.0, {"web": Usage(0.2, 0.0, runs=560, preempted=140)}, 1.0, 1.0)
    assert cpu.preempted_per(100, "web") == 1.4


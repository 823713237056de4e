"""The bench's CPU meter counts the times a process's threads ran: a child woken
fifty times by a ping-pong over pipes ran at least fifty times, and the table
divides what it counted by the work done."""

from __future__ import annotations

import subprocess
import sys

from bench.cpu import CpuMeter, Interval, Usage

# Echoes each line back: every read blocks until the parent writes, so every
# line is one wake-up of the child.
_ECHO = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line); sys.stdout.flush()\n"


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

"""Running the Procfile processes: the ``release`` step, then every other
process until one exits or we are told to stop, then all of them stopped.

A small supervisor of our own rather than honcho's ``Manager``: we need three
things its public API does not offer (see docs/decisions/009-devstack-supervisor.md):
a stop timeout per run (honcho reads a module constant), the process group of
every child written down as it starts (so the next devstack can stop what a
``kill -9``-ed one left running), and the processes as our own children, not
behind a helper process per child.

Each process runs with ``sh -c`` in a session of its own, so a signal to its
process group reaches whatever it forked, and Ctrl-C in the terminal reaches
only us: we stop the processes ourselves, SIGTERM first and SIGKILL after
``stop_timeout`` seconds.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

from devstack.leftovers import record_process_group, stop_recorded_groups
from devstack.process import port_open
from devstack.say import say

# --- signals -----------------------------------------------------------------------


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _stopping(signum: int, frame: object) -> None:
    say(f"devstack: {signal.Signals(signum).name} received, already stopping ...")


def catch_signals() -> None:
    """SIGTERM behaves like Ctrl-C: unwinds to the ``finally`` that stops everything."""
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)


def ignore_signals_while_stopping() -> None:
    """A second Ctrl-C must not cut the stop short and leave processes behind."""
    signal.signal(signal.SIGINT, _stopping)
    signal.signal(signal.SIGTERM, _stopping)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# --- release -------------------------------------------------------------------------


def run_release(command: str, env: dict[str, str], cwd: Path) -> int:
    """Run the Procfile ``release`` process to completion; stop it if we are
    interrupted meanwhile."""
    say(f"devstack: release: {command}")
    proc = subprocess.Popen(command, shell=True, env=env, cwd=cwd, start_new_session=True)
    try:
        return proc.wait()
    finally:
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()


# --- the long-running processes --------------------------------------------------------

COLOURS = (36, 33, 32, 35, 34, 31)  # ANSI: cyan, yellow, green, magenta, blue, red


@dataclass
class Child:
    name: str
    command: str
    env: dict[str, str]
    colour: int = 0
    proc: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Supervisor:
    """Starts the children, prints their output line by line with a
    ``HH:MM:SS name |`` prefix, and stops them all when one exits or when a
    KeyboardInterrupt (Ctrl-C or SIGTERM, see :func:`catch_signals`) arrives."""

    cwd: Path
    record_dir: Path
    stop_timeout: float = 15.0
    out: IO[str] = field(default_factory=lambda: sys.stdout)
    children: list[Child] = field(default_factory=list)
    _lines: queue.Queue[tuple[Child | None, str]] = field(default_factory=queue.Queue, init=False)

    def add(self, name: str, command: str, env: dict[str, str]) -> None:
        self.children.append(Child(name, command, env, COLOURS[len(self.children) % len(COLOURS)]))

    def run(self) -> int:
        """Until one child exits (its exit code) or we are interrupted (0)."""
        try:
            for child in self.children:
                self._start(child)
            return self._wait_for_first_exit()
        except KeyboardInterrupt as exc:
            self._system(f"{exc or 'interrupted'} received, stopping")
            return 0
        finally:
            ignore_signals_while_stopping()
            self.stop()

    def _start(self, child: Child) -> None:
        child.proc = subprocess.Popen(
            child.command, shell=True, env=child.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        record_process_group(self.record_dir, child.name, child.proc.pid)  # own session: pgid == pid
        child.reader = threading.Thread(target=self._read, args=(child,), daemon=True,
                                        name=f"devstack-{child.name}-output")
        child.reader.start()
        self._system(f"{child.name} started (pid={child.proc.pid})")

    def _read(self, child: Child) -> None:
        assert child.proc is not None and child.proc.stdout is not None
        with child.proc.stdout as stream:
            for raw in iter(stream.readline, b""):
                self._lines.put((child, raw.decode("utf-8", "replace").rstrip("\n")))

    def _wait_for_first_exit(self) -> int:
        while True:
            self._print_pending(0.2)
            for child in self.children:
                assert child.proc is not None
                rc = child.proc.poll()
                if rc is not None:
                    self._system(f"{child.name} exited with {rc}; stopping the others")
                    return rc if rc >= 0 else 128 - rc

    def stop(self) -> None:
        """SIGTERM every running child's process group, SIGKILL what is still
        there after ``stop_timeout``; their output keeps being printed meanwhile.

        A child is stopped when every process of it is gone, not when its
        shell is: ``sh -c`` may die of SIGTERM at once while the program it
        started is still shutting down (and holding the services)."""
        running = [c for c in self.children if c.running]
        members = {c.name: _members(c) for c in running}
        for child in running:
            assert child.proc is not None
            self._system(f"sending SIGTERM to {child.name} (pid {child.proc.pid})")
            _signal_group(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        left = running
        while left and time.monotonic() < deadline:
            self._print_pending(0.1)
            left = [c for c in left if _any_alive(c, members[c.name])]
        for child in running:
            assert child.proc is not None
            if child in left:
                self._system(f"sending SIGKILL to {child.name} (pid {child.proc.pid})")
                _signal_group(child.proc.pid, signal.SIGKILL)
                for member in members[child.name]:
                    with contextlib.suppress(psutil.Error):
                        member.kill()  # one that left the group on its own
                child.proc.wait()
                _wait_gone(members[child.name], timeout=5.0)
            else:
                self._system(f"{child.name} stopped (rc={child.proc.returncode})")
        for child in self.children:
            if child.reader is not None:
                # EOF comes when the last process holding the pipe is gone.
                child.reader.join(timeout=2.0)
        self._print_pending(0)
        # Every child has exited: its record is stale.
        stop_recorded_groups(self.record_dir, self.stop_timeout)

    # --- output ---------------------------------------------------------------------

    def _print_pending(self, wait: float) -> None:
        try:
            child, line = self._lines.get(timeout=wait) if wait else self._lines.get_nowait()
            while True:
                self._print(child, line)
                child, line = self._lines.get_nowait()
        except queue.Empty:
            return

    def _system(self, text: str) -> None:
        self._print(None, text)

    def _print(self, child: Child | None, line: str) -> None:
        width = max([6, *(len(c.name) for c in self.children)])
        name = child.name if child is not None else "system"
        prefix = f"{datetime.datetime.now():%H:%M:%S} {name:<{width}} | "
        if child is not None and _is_tty(self.out):
            prefix = f"\033[0m\033[{child.colour}m{prefix}\033[0m"
        print(prefix + line, file=self.out, flush=True)


def _members(child: Child) -> list[psutil.Process]:
    """The child's shell and everything it started, as far as they are still there."""
    assert child.proc is not None
    try:
        leader = psutil.Process(child.proc.pid)
        return [leader, *leader.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _any_alive(child: Child, members: list[psutil.Process]) -> bool:
    assert child.proc is not None
    if child.proc.poll() is None:  # also reaps the shell, which would stay a zombie
        return True
    return any(_running(member) for member in members[1:])


def _running(proc: psutil.Process) -> bool:
    # A zombie is gone for our purposes: its parent (or init) reaps it, and it
    # holds no files, ports or connections.
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(procs: list[psutil.Process], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(_running(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)


def _is_tty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# --- readiness -------------------------------------------------------------------------


def announce_when_ready(host: str, port: int, done: threading.Event,
                        metrics: dict[str, int] | None = None, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not done.is_set() and time.monotonic() < deadline:
        if port_open(port, host):
            base = f"http://{host}:{port}"
            say("\n".join([
                "",
                "devstack: Agent Mesh is up",
                f"  API      {base}",
                f"  docs     {base}/docs",
                f"  OpenAPI  {base}/openapi.json",
                f"  health   {base}/healthz  {base}/readyz",
                f"  metrics  {base}/metrics"
                + "".join(f", {name} :{p}" for name, p in (metrics or {}).items()),
                "  Ctrl-C (or SIGTERM) stops everything.",
                "",
            ]))
            return
        done.wait(0.2)
    if not done.is_set():
        say(f"devstack: the web process is not accepting connections on {host}:{port} "
            f"after {timeout:.0f}s; see its output above")

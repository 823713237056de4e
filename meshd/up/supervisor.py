"""``mesh up``: one supervisor, one child process per agent of the file.

Each agent is its own ``mesh daemon`` / ``mesh agent`` process, so a crash or a
slow handler of one never stalls another's inbox. A child that exits (crash,
``kill -9``, rejected key) is started again after a backoff (:class:`Backoff`,
reset once a run lasted ``restart.healthy_after``); its key is read again from
its source each time. Delivery guarantees stay the daemon's: its state folder
survives the restart, so an event that was mid-handler is handled again and
replied to once.

SIGTERM/SIGINT: every child gets SIGTERM and drains as ``mesh daemon`` does
(running handler finishes, agent goes draining, state flushed); each is waited
for up to ``stop_timeout`` and killed after that. Exit 0 when every child
stopped by itself. The children are started in their own sessions (a Ctrl-C
reaches the supervisor only) and get SIGTERM if the supervisor dies.

Each agent's ``up-status.json`` (:mod:`meshd.up.status`) says what the
supervisor knows of it; ``mesh status FILE`` reads those.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import TextIO

from meshd.backoff import Backoff
from meshd.daemon.handlers import parent_death_signal
from meshd.errors import ConfigError
from meshd.options import Stopped, StopSignal
from meshd.up.spec import Agent, Plan
from meshd.up.status import AgentStatus

log = logging.getLogger("meshd.up")

LOCK_FILE = "up.lock"
# Environment the supervisor never passes on: each child gets its own key.
CREDENTIAL_ENV = ("MESH_API_KEY", "MESH_TOKEN")


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _error_line(line: str) -> str | None:
    """The part of a child's log line worth showing as its last error, if it is one."""
    if line.startswith("mesh: "):
        return line
    for level in (" ERROR ", " CRITICAL "):
        if level in line:
            return line.split(level, 1)[1].strip()
    return None


class Supervisor:
    def __init__(
        self, plan: Plan, *, env: Mapping[str, str] | None = None, out: TextIO | None = None
    ) -> None:
        self.plan = plan
        self.env = dict(os.environ if env is None else env)
        self.out = out or sys.stderr
        self._stop = StopSignal()
        self._locks: list[int] = []

    def request_stop(self) -> None:
        if not self._stop.is_set:
            log.info("stop requested: draining %d agents", len(self.plan.agents))
            self._stop.set()

    # -- start -----------------------------------------------------------------
    def _lock(self, agent: Agent) -> None:
        agent.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(agent.state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(
                f"agent {agent.id} is already run by another `mesh up` (state folder {agent.state_dir})"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._locks.append(fd)

    async def run(self) -> int:
        # Every key is read before anything starts: a missing one is a mistake in the file.
        keys = {a.id: a.api_key(self.env) for a in self.plan.agents}
        try:
            for agent in self.plan.agents:
                self._lock(agent)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
            try:
                keepers = [
                    asyncio.create_task(self._keep(a, keys[a.id]), name=f"up-{a.id}")
                    for a in self.plan.agents
                ]
                clean = await asyncio.gather(*keepers)
            finally:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
        finally:
            for fd in self._locks:
                os.close(fd)
            self._locks.clear()
        log.info("all agents stopped")
        return 0 if all(clean) else 1

    def _child_env(self, agent: Agent, key: str) -> dict[str, str]:
        env = {k: v for k, v in self.env.items() if k not in CREDENTIAL_ENV}
        env.update(agent.entry.env)
        env["MESH_API_KEY"] = key  # the environment, not argv: not shown by ps to other users
        if self.plan.spec.url:
            env["MESH_URL"] = self.plan.spec.url
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    async def _spawn(self, agent: Agent, key: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "meshd.cli", *agent.argv(),
            env=self._child_env(agent, key),
            cwd=str(self.plan.path.parent),
            stdin=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=parent_death_signal(signal.SIGTERM),
        )  # fmt: skip

    # -- one agent ---------------------------------------------------------------
    async def _keep(self, agent: Agent, key: str | None) -> bool:
        """Run ``agent`` until the stop; True when its last child stopped by itself."""
        r = self.plan.spec.restart
        backoff = Backoff(r.initial, r.maximum)
        st = AgentStatus(agent.id, agent.kind)
        while True:
            try:
                if key is None:
                    key = agent.api_key(self.env)
                proc = await self._spawn(agent, key)
            except (ConfigError, OSError) as e:
                st.last_error = str(e)
                log.error("%s: %s", agent.id, e)
                started = time.monotonic()
            else:
                started = time.monotonic()
                st.state, st.pid, st.started_at, st.next_start_at = "running", proc.pid, time.time(), None
                st.save(agent.state_dir)
                log.info("%s: %s started (pid %d)", agent.id, agent.kind, proc.pid)
                stopped = await self._watch(agent, proc, st)
                if stopped is not None:
                    return stopped
            if time.monotonic() - started >= r.healthy_after:
                backoff.reset()
            delay = backoff.next()
            st.state, st.pid, st.next_start_at = "restarting", None, time.time() + delay
            st.restarts += 1
            st.save(agent.state_dir)
            log.warning("%s: restarting in %.1fs", agent.id, delay)
            key = None  # read again: the file or keyring may have been fixed
            try:
                await self._stop.sleep(delay)
            except Stopped:
                st.state, st.next_start_at = "stopped", None
                st.save(agent.state_dir)
                return True

    async def _watch(self, agent: Agent, proc: asyncio.subprocess.Process, st: AgentStatus) -> bool | None:
        """Wait for the child's exit or the stop; None when it exited on its own (restart it)."""
        pump = asyncio.create_task(self._pump(agent, proc, st))
        exited = asyncio.create_task(proc.wait())
        stop = asyncio.create_task(self._stop.wait())
        await asyncio.wait({exited, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        clean = True
        if not exited.done():
            st.state = "stopping"
            st.save(agent.state_dir)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(self.plan.spec.stop_timeout):
                    await asyncio.shield(exited)
            except TimeoutError:
                log.error(
                    "%s: still running %gs after SIGTERM; killed", agent.id, self.plan.spec.stop_timeout
                )
                clean = False
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await exited
        code = exited.result()
        run_error = None
        with contextlib.suppress(Exception):
            run_error = await pump
        st.last_exit, st.pid = code, None
        if self._stop.is_set:
            st.state = "stopped"
            st.save(agent.state_dir)
            log.info("%s: stopped (%s)", agent.id, describe_exit(code))
            return clean and code == 0
        # Kept across the restart: what `mesh status` shows until the next error.
        st.last_error = describe_exit(code) + (f": {run_error}" if run_error else "")
        log.warning("%s: %s", agent.id, describe_exit(code))
        return None

    async def _pump(self, agent: Agent, proc: asyncio.subprocess.Process, st: AgentStatus) -> str | None:
        """The child's log, prefixed with its id, onto ours; error lines become its last error.

        Returns the last error line of this run."""
        assert proc.stderr is not None
        last = None
        while True:
            try:
                raw = await proc.stderr.readline()
            except ValueError:  # a line over the stream's limit: dropped, the next one is read
                continue
            if not raw:
                return last
            line = raw.decode(errors="replace").rstrip("\n")
            self.out.write(f"[{agent.id}] {line}\n")
            self.out.flush()
            err = _error_line(line)
            if err:
                st.last_error = last = err
                st.save(agent.state_dir)

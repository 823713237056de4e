"""Helpers for the meshd tests: real processes, real sockets, nothing faked.

- :class:`Proc` runs ``mesh …`` (a daemon, the CLI) as a child process and lets
  a test await a line on its stderr instead of sleeping.
- :class:`Probe` is a Unix socket the test handlers report to, one line per
  handled event, so a test awaits "N events handled" as an event.
- :class:`GatewayProc` runs the real gateway as its own process (uvicorn) on a
  fixed port, so a test can kill -9 it and start it again on the same port.
- :class:`Proxy` is a TCP relay in front of a gateway that can cut every
  connection and answer 503 to chosen paths (the gateway behind it is real).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.platform.settings import Settings
from devstack.process import free_port

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0


def mesh_env(url: str, api_key: str | None, tmp: Path, **extra: str) -> dict[str, str]:
    """Environment for a ``mesh`` child: no inherited MESH_* settings, a private HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    env.update(
        HOME=str(tmp / "home"),
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
        MESH_URL=url,
        MESH_CONFIG=str(tmp / "home" / "mesh-config.json"),
        MESH_STATE_DIR=str(tmp / "state"),
    )
    if api_key:
        env["MESH_API_KEY"] = api_key
    env.update(extra)
    return env


async def process_exit(pid: int, timeout: float = TIMEOUT) -> None:
    """Await the end of any process (not only a child) through a pidfd."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(fd, lambda: done.done() or done.set_result(None))
    try:
        async with asyncio.timeout(timeout):
            await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def mesh_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "meshd.cli", *args]


class Proc:
    """A child process whose stderr lines a test can await."""

    def __init__(self, argv: list[str], env: Mapping[str, str], name: str = "proc") -> None:
        self.argv = argv
        self.env = dict(env)
        self.name = name
        self.proc: asyncio.subprocess.Process | None = None
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self._reader: asyncio.Task[None] | None = None
        self.stdout = b""

    async def start(self) -> Proc:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            env=self.env,
            cwd=str(REPO),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc and self.proc.stderr
        while line := await self.proc.stderr.readline():
            text = line.decode(errors="replace").rstrip("\n")
            async with self._changed:
                self.lines.append(text)
                self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()

    def count(self, pattern: str) -> int:
        rx = re.compile(pattern)
        return sum(1 for line in self.lines if rx.search(line))

    async def wait_log(self, pattern: str, *, after: int = 0, timeout: float = TIMEOUT) -> str:
        """Await a stderr line matching ``pattern`` (among lines[after:])."""
        rx = re.compile(pattern)
        async with asyncio.timeout(timeout):
            async with self._changed:
                while True:
                    for line in self.lines[after:]:
                        if rx.search(line):
                            return line
                    if self._reader is not None and self._reader.done():
                        raise AssertionError(f"{self.name} exited before logging {pattern!r}:\n" + self.log())
                    await self._changed.wait()

    def log(self) -> str:
        return "\n".join(self.lines[-80:])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)

    async def wait(self, timeout: float = TIMEOUT) -> int:
        assert self.proc is not None
        async with asyncio.timeout(timeout):
            code = await self.proc.wait()
            if self._reader is not None:
                await self._reader
        return code

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.signal(signal.SIGKILL)
        await self.wait()


async def run_mesh(
    *args: str, env: Mapping[str, str], stdin: bytes | None = None, timeout: float = TIMEOUT
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *mesh_cmd(*args),
        env=dict(env),
        cwd=str(REPO),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(timeout):
        out, err = await proc.communicate(stdin)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def run_mesh_json(*args: str, env: Mapping[str, str], stdin: bytes | None = None) -> Any:
    code, out, err = await run_mesh(*args, "--json", env=env, stdin=stdin)
    assert code == 0, f"mesh {' '.join(args)} → {code}\n{err}"
    return json.loads(out)


class Probe:
    """A Unix socket server; test handlers write one line per handled event."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> Probe:
        self._server = await asyncio.start_unix_server(self._client, path=str(self.path))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2):
                await self._server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                async with self._changed:
                    self.lines.append(line.decode().rstrip("\n"))
                    self._changed.notify_all()
        finally:
            writer.close()

    async def wait_for(self, n: int, *, prefix: str = "", timeout: float = TIMEOUT) -> list[str]:
        """Await until ``n`` lines starting with ``prefix`` arrived; returns them."""
        async with asyncio.timeout(timeout):
            async with self._changed:
                while True:
                    got = [line for line in self.lines if line.startswith(prefix)]
                    if len(got) >= n:
                        return got
                    await self._changed.wait()


def gateway_env(settings: Settings, port: int, **overrides: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    values: dict[str, Any] = {
        "database_url": settings.database_url,
        "redis_url": settings.redis_url,
        "kafka_bootstrap": settings.kafka_bootstrap,
        "jwt_secret": settings.jwt_secret,
        "ratelimit_enabled": "false",
        "host": "127.0.0.1",
        "port": port,
        "log_level": "WARNING",
        **overrides,
    }
    for key, value in values.items():
        if value is not None:
            env[f"MESH_{key.upper()}"] = str(value)
    env["PYTHONPATH"] = str(REPO)
    return env


class GatewayProc:
    """The real gateway (``uvicorn app.main:create_app --factory``) in its own process."""

    def __init__(self, settings: Settings, **overrides: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = gateway_env(settings, self.port, **overrides)
        self.proc: Proc | None = None

    async def start(self) -> None:
        argv = [
            sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory",
            "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "info",
            "--no-access-log", "--timeout-graceful-shutdown", "2",
        ]  # fmt: skip
        self.proc = Proc(argv, self.env, name="gateway")
        await self.proc.start()
        await self.proc.wait_log("Uvicorn running on")

    async def kill(self) -> None:
        if self.proc is not None:
            await self.proc.stop()


class Proxy:
    """TCP relay to ``upstream``: can cut all connections, answer 503 to a path
    (``blocked``: a gateway that is away) or 404 (``absent``: an older gateway
    without that route).

    Requests are parsed just enough (request line, Content-Length) to see every
    request on a keep-alive connection; bytes are otherwise passed unchanged.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.blocked: set[str] = set()
        self.refused_requests = 0
        self.refused = asyncio.Event()  # set on the first refused request
        self.absent: set[str] = set()
        self.requests: Counter[str] = Counter()  # by path, every request seen
        self._conns: set[asyncio.StreamWriter] = set()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Proxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.drop_all()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def drop_all(self) -> None:
        for w in list(self._conns):
            with contextlib.suppress(Exception):
                w.transport.abort()
        self._conns.clear()

    def _spawn(self, coro: Any) -> None:
        t = asyncio.create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            cw.transport.abort()
            return
        self._conns.update({cw, uw})
        self._spawn(self._pipe(ur, cw))
        try:
            while True:
                head = await cr.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode(errors="replace").split("?")[0]
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                body = await cr.readexactly(length) if length else b""
                self.requests[path] += 1
                if path in self.blocked:
                    self.refused_requests += 1
                    self.refused.set()
                    await self._answer(cw, 503, "Service Unavailable", "blocked by the test proxy")
                    break
                if path in self.absent:
                    await self._answer(cw, 404, "Not Found", f"no route {path}")
                    break
                uw.write(head + body)
                await uw.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            for w in (cw, uw):
                self._conns.discard(w)
                with contextlib.suppress(Exception):
                    w.close()

    @staticmethod
    async def _answer(cw: asyncio.StreamWriter, status: int, title: str, detail: str) -> None:
        problem = json.dumps(
            {"type": "about:blank", "title": title, "status": status, "detail": detail}
        ).encode()  # fmt: skip
        cw.write(
            f"HTTP/1.1 {status} {title}\r\n".encode()
            + b"Content-Type: application/problem+json\r\n"
            + f"Content-Length: {len(problem)}\r\n".encode()
            + b"Connection: close\r\n\r\n"
            + problem
        )
        await cw.drain()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            self._conns.discard(writer)
            with contextlib.suppress(Exception):
                writer.transport.abort()


async def gateway_runs(owner: Any, agent_id: str, *, settled: int | None = None) -> list[dict[str, Any]]:
    """The agent's runs at the gateway, oldest first (every page). With ``settled``,
    awaits that many runs, all ended: the end reports follow the handler's work."""
    seen: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(TIMEOUT):
            while True:
                seen = await _all_runs(owner, agent_id)
                if settled is None or (len(seen) >= settled
                                       and all(r["outcome"] != "running" for r in seen)):
                    return seen
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"awaited {settled} ended runs of {agent_id}; the gateway has "
                             f"{[(r['outcome'], r['error']) for r in seen]}") from None


async def _all_runs(owner: Any, agent_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 100}
    while True:
        page = (await owner.get(f"/v1/agents/{agent_id}/runs", params=params)).json()
        found.extend(page["runs"])
        if not page["next_cursor"]:
            return found[::-1]
        params["cursor"] = page["next_cursor"]

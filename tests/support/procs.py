"""Mesh processes as real OS processes, for fault tests: kill -9, SIGTERM, restart.

Each runs exactly the command its Procfile line runs, with the test's
settings passed as ``MESH_*`` environment variables.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.platform.settings import Settings
from devstack import procfile
from devstack.process import free_port, port_open

REPO = Path(__file__).resolve().parents[2]


def procfile_commands() -> dict[str, list[str]]:
    """The worker lines of the Procfile, run with this interpreter: what the fault
    tests and benchmarks start is what production starts."""
    commands: dict[str, list[str]] = {}
    for name, command in procfile.read(REPO / "Procfile").processes:
        if name == "web":
            continue
        argv = shlex.split(command)
        if argv[0] == "python":
            argv = [sys.executable, *argv[1:]]
        elif argv[0] == "arq":
            argv = [sys.executable, "-m", "arq", *argv[1:]]
        commands[name] = argv
    return commands


COMMANDS = procfile_commands()
# Where MeshProcess logs go; the test session points it into its temporary
# folder, which it removes at the end. None: the system's temporary folder
# (the bench removes its logs itself).
LOG_DIR: Path | None = None
READY_LINE = {"outbox": "relay started", "push": "push started", "cron": "cron started",
              "webhook": "webhook worker started", "a2a-bridge": "a2a bridge started"}


def settings_env(settings: Settings, **extra: Any) -> dict[str, str]:
    env = dict(os.environ)
    data = settings.model_dump()
    data.update(extra)
    for key, value in data.items():
        if value is None:
            env.pop(f"MESH_{key.upper()}", None)
            continue
        if isinstance(value, (list, dict, tuple)):
            env[f"MESH_{key.upper()}"] = json.dumps(value)
        else:
            env[f"MESH_{key.upper()}"] = str(value)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class MeshProcess:
    def __init__(self, kind: str, settings: Settings, *,
                 os_env: Mapping[str, str] | None = None, **extra: Any) -> None:
        """``extra``: settings (MESH_*); ``os_env``: other environment variables."""
        self.kind = kind
        self.settings = settings
        self.extra = extra
        self.os_env = dict(os_env or {})
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = Path(tempfile.mkstemp(prefix=f"mesh-{kind}-", suffix=".log", dir=LOG_DIR)[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        if self.kind == "web":
            self.port = self.port or free_port()
            return [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory",
                    "--host", "127.0.0.1", "--port", str(self.port), "--no-access-log",
                    "--log-level", "warning"]
        return COMMANDS[self.kind]

    async def start(self, timeout: float = 60.0) -> MeshProcess:
        cmd = self.command()
        with open(self.log, "ab") as log:
            env = settings_env(self.settings, **self.extra) | self.os_env
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=env,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        offset = 0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}:\n"
                                   f"{self.tail()}")
            if self.kind == "web":
                if port_open(self.port or 0):
                    return self
            else:
                text = self.log.read_text(errors="replace")
                if READY_LINE[self.kind] in text[offset:]:
                    return self
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.kind} not ready in {timeout}s:\n{self.tail()}")

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    async def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for a graceful exit; returns the exit code."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                os.killpg(self.proc.pid, signal.SIGKILL)
                raise TimeoutError(f"{self.kind} ignored SIGTERM for {timeout}s:\n{self.tail()}")
            await asyncio.sleep(0.05)
        return self.proc.returncode

    async def restart(self) -> MeshProcess:
        return await self.start()

    def stop_quietly(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)

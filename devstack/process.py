"""A child service process: start, wait until it accepts connections, stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class ServiceProcess:
    """One service we own. Started in its own process group so that stopping
    it also stops anything it forked."""

    name = "service"

    def __init__(self, port: int, log_path: Path) -> None:
        self.port = port
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> Sequence[str]:
        raise NotImplementedError

    def popen_kwargs(self) -> dict[str, object]:
        return {}

    def start(self, timeout: float = 60.0) -> None:
        if self.proc and self.proc.poll() is None:
            return
        if port_open(self.port):
            raise RuntimeError(f"{self.name}: port {self.port} is already in use")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            list(self.command()), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, **self.popen_kwargs(),  # type: ignore[arg-type]
        )
        log.close()
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")
            if self.ready():
                return
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} did not accept connections on port {self.port} "
                           f"within {timeout:.0f}s; see {self.log_path}")

    def ready(self) -> bool:
        return port_open(self.port)

    def stop(self, timeout: float = 20.0) -> None:
        self._signal(signal.SIGTERM)
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait(5)
        self.proc = None

    def kill(self) -> None:
        """kill -9, for fault tests."""
        self._signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)
            self.proc = None

    def _signal(self, sig: int) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

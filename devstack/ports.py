"""Which local ports a devstack needs, and who holds one that is taken."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psutil

from devstack.process import port_open

METRICS_PORT_BASE = 9100


def listening_pid(port: int, connections: Iterable[Any] | None = None) -> int | None:
    """The pid of the process listening on local TCP ``port``; None when it is
    not found or belongs to a process we may not inspect. ``connections``
    (``psutil.net_connections`` rows, whose type psutil keeps private) is for tests."""
    for conn in connections if connections is not None else psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return conn.pid
    return None


def who_listens(port: int) -> str:
    """'pid N (command)' of the process listening on a local TCP port, if found."""
    try:
        pid = listening_pid(port)
    except psutil.AccessDenied:
        pid = None
    if pid is None:
        return "another user's process, or one that is gone"
    try:
        cmd = " ".join(psutil.Process(pid).cmdline()).strip()[:120]
    except psutil.Error:
        cmd = "?"
    return f"pid {pid} ({cmd})"


def ensure_free(port: int, what: str, remedy: str, host: str = "127.0.0.1") -> None:
    """Fail with who holds ``port`` and what to do, before we start anything on it."""
    if port_open(port, host):
        raise SystemExit(f"devstack: port {port} for {what} is taken by {who_listens(port)}; "
                         f"stop it, or {remedy}")


def web_address(env: dict[str, str]) -> tuple[str, int]:
    """Where the web process (Procfile: ``--host ${MESH_HOST} --port ${PORT}``) listens."""
    host = env.get("MESH_HOST") or "127.0.0.1"
    port = int(env.get("PORT") or 8080)
    return ("127.0.0.1" if host in ("0.0.0.0", "::", "") else host), port


def metrics_ports(names: list[str]) -> dict[str, int]:
    """A metrics port of its own for each process but web (which serves
    /metrics on its HTTP port): outbox 9101, push 9102, cron 9103 ..."""
    workers = [name for name in names if name != "web"]
    return {name: METRICS_PORT_BASE + i for i, name in enumerate(workers, 1)}

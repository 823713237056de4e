"""NATS with JetStream from Debian's ``nats-server`` package (``apt-get install nats-server``).

Started as ``nats-server -js -sd <data>``: file storage under ``.mesh/nats`` for
``make run``, so the stream and the consumer's position survive a restart. A
small config file raises ``max_payload`` above the bus's 2 MiB record limit
(the server's default is 1 MiB).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from devstack.process import ServiceProcess

# Debian installs it in /usr/sbin, which is not on a normal user's PATH.
_DEBIAN_PATH = Path("/usr/sbin/nats-server")
MISSING_NATS = "needs `nats-server` (Debian: apt-get install nats-server)"


def server_binary() -> str | None:
    found = shutil.which("nats-server")
    if found:
        return found
    return str(_DEBIAN_PATH) if _DEBIAN_PATH.exists() else None


def nats_available() -> bool:
    return server_binary() is not None


class Nats(ServiceProcess):
    name = "nats"

    def __init__(self, data_dir: Path, port: int) -> None:
        super().__init__(port, data_dir.parent / "nats.log")
        self.data_dir = data_dir

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "nats.conf"

    def start(self, timeout: float = 30.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("max_payload: 8MB\n")
        super().start(timeout)

    def command(self) -> Sequence[str]:
        binary = server_binary()
        if binary is None:
            raise RuntimeError(f"NATS {MISSING_NATS}")
        return [binary, "-c", str(self.config_path), "-a", "127.0.0.1", "-p", str(self.port),
                "-js", "-sd", str(self.data_dir / "jetstream")]

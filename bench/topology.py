"""N of each mesh process on one machine: N web processes, N outbox relays, N push workers.

Every process is ``tests.support.procs.MeshProcess``, i.e. the Procfile command
with the same ``MESH_*`` settings (web: uvicorn single worker on its own port,
as a PaaS would run N instances of the ``web`` line). The load client spreads
requests and SSE streams over the web processes round robin
(``bench.client.Client`` with several URLs), as the platform's router would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.platform.settings import Settings
from bench.env import Env
from tests.support.procs import MeshProcess

KINDS = ("web", "outbox", "push")


@dataclass
class Topology:
    procs: dict[str, list[MeshProcess]] = field(default_factory=lambda: {k: [] for k in KINDS})
    # The settings each kind runs with (the outbox is restarted on the seed relay's
    # settings for the latency baseline); None: the bench's settings.
    settings: dict[str, Settings | None] = field(default_factory=lambda: dict.fromkeys(KINDS))
    # Other environment variables per kind (the tracing scenario's ``OTEL_*``); None: none.
    os_env: dict[str, dict[str, str] | None] = field(default_factory=lambda: dict.fromkeys(KINDS))

    @property
    def size(self) -> int:
        return len(self.procs["web"])

    @property
    def web(self) -> MeshProcess:
        """The first web process: never stopped while the topology shrinks."""
        return self.procs["web"][0]

    @property
    def urls(self) -> list[str]:
        return [p.url for p in self.procs["web"]]

    def named(self) -> dict[str, MeshProcess]:
        """``web``, ``web 2``, ``outbox``, … for the CPU table."""
        out: dict[str, MeshProcess] = {}
        for kind in KINDS:
            for i, proc in enumerate(self.procs[kind]):
                out[kind if i == 0 else f"{kind} {i + 1}"] = proc
        return out

    async def resize(self, env: Env, n: int) -> None:
        """Start or stop processes (the newest first) until exactly ``n`` of each run."""
        for kind in KINDS:
            running = self.procs[kind]
            while len(running) > n:
                await env.stop(running.pop())
            while len(running) < n:
                running.append(await env.process(kind, self.settings[kind], self.os_env[kind]))

    async def restart(self, env: Env, kind: str, settings: Settings | None,
                      os_env: dict[str, str] | None = None) -> None:
        """Every process of ``kind`` again, with ``settings`` (None: the bench's) and
        ``os_env`` (other environment variables; None: none)."""
        self.settings[kind] = settings
        self.os_env[kind] = os_env
        n = len(self.procs[kind])
        for proc in self.procs[kind]:
            await env.stop(proc)
        self.procs[kind] = [await env.process(kind, settings, os_env) for _ in range(n)]

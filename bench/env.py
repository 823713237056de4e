"""The bench's own world: embedded services on ephemeral ports in a temp folder,
a migrated database, the mesh processes, and facts about the machine.

Everything is started from the project's code: ``devstack.stack.Stack`` for
Postgres/Redis/Kafka, ``app.platform.migrate`` for the schema and
``tests.support.procs.MeshProcess`` for web/outbox/push, i.e. the exact
Procfile commands (uvicorn single worker, outbox relay, push worker).
"""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from app.platform.migrate import ensure_database, migrate
from app.platform.settings import Settings
from bench.counters import PG_SETTINGS, tracking_off
from bench.cpu import LOAD_CLIENT, CpuMeter
from devstack.bus import KafkaPolicy, NatsPolicy, wants_nats
from devstack.leftovers import scratch_data_dir
from devstack.process import free_port
from devstack.stack import Ports, Stack
from tests.support.procs import REPO, MeshProcess

# The seed design's relay: poll every second, 50 rows, no wake-up.
BASELINE_RELAY = {"relay_wakeup": False, "relay_sweep_seconds": 1.0, "relay_batch_size": 50}


def raise_nofile(want: int = 65536) -> int:
    """Raise this process's open-file limit (children inherit it); returns the soft limit."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for target_hard in (max(hard, want), hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, target_hard), target_hard))
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def machine_facts() -> dict[str, str]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "?"

    dirty = [line for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
             if line.strip()]
    load = os.getloadavg()
    mem = psutil.virtual_memory()
    return {
        "commit": git("rev-parse", "--short", "HEAD")
        + (f" (+{len(dirty)} uncommitted tracked files in the work tree)" if dirty else ""),
        "cores": f"{os.cpu_count()} logical ({psutil.cpu_count(logical=False) or '?'} physical)",
        "cpu": platform.processor() or platform.machine(),
        "memory": f"{mem.total / 2**30:.0f} GiB",
        "load average at start (1/5/15 min)": " / ".join(f"{x:.2f}" for x in load),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def rss_kb(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss // 1024)


@dataclass
class Env:
    """Started services and the settings every mesh process gets."""

    root: Path
    stack: Stack
    settings: Settings
    procs: list[MeshProcess] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    kafka_jmx_port: int | None = None   # the broker's JMX port (bench.counters)

    @property
    def kafka(self) -> bool:
        return self.settings.kafka_bootstrap is not None

    @property
    def nats(self) -> bool:
        return self.settings.nats_url is not None

    def variant(self, **overrides: Any) -> Settings:
        """The bench settings with some fields changed (validated like a process's env)."""
        return Settings(**(self.settings.model_dump() | overrides))

    async def process(self, kind: str, settings: Settings | None = None,
                      os_env: dict[str, str] | None = None) -> MeshProcess:
        """``os_env``: other environment variables (e.g. ``OTEL_*``) on top of ours."""
        proc = MeshProcess(kind, settings or self.settings, os_env=os_env)
        self.procs.append(proc)
        self.logs.append(proc.log)
        await proc.start()
        return proc

    def meter(self, procs: dict[str, MeshProcess],
              extra: dict[str, int] | None = None) -> CpuMeter:
        """CPU accounting for the given mesh processes, the services and this load client
        (and ``extra`` name → pid, e.g. the profiler)."""
        parts: dict[str, tuple[int, bool]] = {}
        for name, proc in procs.items():
            if proc.proc is not None:
                parts[name] = (proc.proc.pid, True)
        for name, svc in (("postgres", self.stack.postgres), ("redis", self.stack.redis),
                          ("kafka", self.stack.kafka), ("nats", self.stack.nats)):
            if svc is not None and svc.proc is not None:
                parts[name] = (svc.proc.pid, True)
        parts[LOAD_CLIENT] = (os.getpid(), False)
        for name, pid in (extra or {}).items():
            parts[name] = (pid, True)
        return CpuMeter(parts)

    async def stop(self, proc: MeshProcess) -> None:
        with contextlib.suppress(Exception):
            await proc.terminate(20)
        proc.stop_quietly()
        with contextlib.suppress(ValueError):
            self.procs.remove(proc)


def bench_settings(urls: dict[str, str]) -> Settings:
    return Settings(
        database_url=urls["MESH_DATABASE_URL"],
        redis_url=urls["MESH_REDIS_URL"],
        kafka_bootstrap=urls.get("MESH_KAFKA_BOOTSTRAP"),
        nats_url=urls.get("MESH_NATS_URL"),
        jwt_secret="bench-secret-" + "x" * 32,
        # The limiter stays in the request path (its Redis round trip is part of
        # the cost of a send) but never rejects: the bench drives a few agents
        # far above the per-agent default of 50 req/s on purpose.
        ratelimit_enabled=True,
        ratelimit_rate=1e9,
        ratelimit_burst=1_000_000_000,
    )


@contextlib.asynccontextmanager
async def started(keep: bool = False, bus: str = "kafka") -> AsyncIterator[Env]:
    """The bench's services and settings; ``bus`` is the one every mesh process uses
    (``kafka``: Kafka when Java can run it, else Redis Streams). With another bus no
    broker is started: an idle JVM beside the run would be counted as the stack's."""
    with scratch_data_dir("mesh-bench-") as root:
        env_without_urls = {k: v for k, v in os.environ.items()
                            if k not in ("MESH_DATABASE_URL", "MESH_REDIS_URL", "MESH_KAFKA_BOOTSTRAP",
                                         "MESH_NATS_URL", "MESH_BUS")}
        # pg_stat_statements preloaded but not tracking, and a JMX port on the broker:
        # the profile scenario's counters (bench.counters; ADR 024). Both cost nothing
        # until that scenario turns tracking on / reads the counters.
        jmx = free_port()
        kafka = KafkaPolicy.IF_JAVA if bus == "kafka" else KafkaPolicy.OFF
        if bus != "kafka":
            env_without_urls["MESH_BUS"] = bus  # a missing nats-server is then an error naming it
        nats = NatsPolicy.REQUIRED if wants_nats(env_without_urls) else NatsPolicy.IF_AVAILABLE
        stack = Stack(root, Ports.ephemeral(), kafka_policy=kafka, nats_policy=nats,
                      env=env_without_urls, postgres_settings=PG_SETTINGS, kafka_jmx_port=jmx)
        urls = stack.start()
        settings = bench_settings(urls)
        if bus != "kafka":
            settings = Settings(**(settings.model_dump() | {"bus": bus}))
        env = Env(root, stack, settings, kafka_jmx_port=jmx if stack.kafka else None)
        try:
            await ensure_database(env.settings.database_url)
            await migrate(env.settings.database_url)
            await tracking_off(env.settings.database_url)
            yield env
        finally:
            for proc in list(env.procs):
                proc.stop_quietly()
            stack.stop()
            if not keep:
                shutil.rmtree(root, ignore_errors=True)
                for log in env.logs:
                    log.unlink(missing_ok=True)

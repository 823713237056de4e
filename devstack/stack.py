"""The whole embedded stack: which services to start, where their data lives,
and the environment (``MESH_*`` URLs) that points the mesh at them.

A URL already present in the environment replaces the embedded service.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from devstack.kafka import Kafka, java_available
from devstack.postgres import Postgres
from devstack.process import ServiceProcess, free_port
from devstack.redis import Redis

log = logging.getLogger("devstack")


@dataclass
class Ports:
    postgres: int
    redis: int
    kafka: int
    kafka_controller: int

    @classmethod
    def fixed(cls) -> Ports:
        """Stable ports for ``make run`` so the URLs stay the same across restarts."""
        return cls(postgres=54329, redis=63799, kafka=19092, kafka_controller=19093)

    @classmethod
    def ephemeral(cls) -> Ports:
        return cls(free_port(), free_port(), free_port(), free_port())


@dataclass
class Stack:
    root: Path
    ports: Ports
    want_kafka: bool = True
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    postgres: Postgres | None = None
    redis: Redis | None = None
    kafka: Kafka | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def services(self) -> list[ServiceProcess]:
        return [s for s in (self.postgres, self.redis, self.kafka) if s is not None]

    def start(self) -> dict[str, str]:
        """Start what the environment does not provide; return the MESH_* URLs.

        If one service fails to start (or the caller is interrupted), the ones
        already running are stopped before the error propagates: callers that
        never reach their own ``stop()`` leave nothing behind.
        """
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> dict[str, str]:
        self.root.mkdir(parents=True, exist_ok=True)
        urls: dict[str, str] = {}
        if self.env.get("MESH_DATABASE_URL"):
            urls["MESH_DATABASE_URL"] = self.env["MESH_DATABASE_URL"]
        else:
            self.postgres = Postgres(self.root / "postgres", self.ports.postgres)
            self.postgres.start()
            urls["MESH_DATABASE_URL"] = self.postgres.url
        if self.env.get("MESH_REDIS_URL"):
            urls["MESH_REDIS_URL"] = self.env["MESH_REDIS_URL"]
        else:
            self.redis = Redis(self.root / "redis", self.ports.redis)
            self.redis.start()
            urls["MESH_REDIS_URL"] = self.redis.url
        if self.env.get("MESH_KAFKA_BOOTSTRAP"):
            urls["MESH_KAFKA_BOOTSTRAP"] = self.env["MESH_KAFKA_BOOTSTRAP"]
        elif self.want_kafka and java_available():
            self.kafka = Kafka(self.root / "kafka", self.ports.kafka, self.ports.kafka_controller)
            self.kafka.start()
            urls["MESH_KAFKA_BOOTSTRAP"] = self.kafka.bootstrap
        elif self.want_kafka:
            self.notes.append("Java or Maven not found: the bus falls back to Redis Streams "
                              "(set MESH_KAFKA_BOOTSTRAP to use an existing Kafka).")
        return urls

    def stop(self) -> None:
        for service in reversed(self.services):
            try:
                service.stop()
            except Exception:  # stop the rest whatever one does
                log.exception("stopping %s failed", service.name)

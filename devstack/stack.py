"""The whole embedded stack: which services to start, where their data lives,
and the environment (``MESH_*`` URLs) that points the mesh at them.

A URL already present in the environment replaces the embedded service. What
happens to Kafka (start it, use another, or fall back to Redis Streams) is
decided in :mod:`devstack.bus`, from the policies the caller gives; so is
whether NATS starts.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from devstack import bus
from devstack.bus import NATS_URL_VAR, BusChoice, KafkaPolicy, NatsPolicy
from devstack.jaeger import Jaeger
from devstack.kafka import Kafka, java_available
from devstack.nats import Nats, nats_available
from devstack.postgres import Postgres
from devstack.process import ServiceProcess, free_port
from devstack.redis import Redis

log = logging.getLogger("devstack")

# MESH_TRACING=jaeger: the stack also runs Jaeger and the processes trace to it.
TRACING_VAR = "MESH_TRACING"


@dataclass
class Ports:
    postgres: int
    redis: int
    kafka: int
    kafka_controller: int
    nats: int
    # Jaeger's UI / query API and its OTLP/HTTP receiver (MESH_TRACING=jaeger).
    jaeger: int = 16686
    jaeger_otlp: int = 4318

    @classmethod
    def fixed(cls) -> Ports:
        """Stable ports for ``make run`` so the URLs stay the same across restarts."""
        return cls(postgres=54329, redis=63799, kafka=19092, kafka_controller=19093,
                   nats=14222, jaeger=16686, jaeger_otlp=4318)

    @classmethod
    def ephemeral(cls) -> Ports:
        return cls(free_port(), free_port(), free_port(), free_port(), free_port(),
                   free_port(), free_port())


@dataclass
class Stack:
    root: Path
    ports: Ports
    kafka_policy: KafkaPolicy = KafkaPolicy.IF_JAVA
    nats_policy: NatsPolicy = NatsPolicy.IF_AVAILABLE
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    # Measuring hooks, off unless given; only the bench sets them (ADR 024):
    # extra Postgres server settings and a JMX port for the embedded Kafka.
    postgres_settings: dict[str, str] = field(default_factory=dict)
    kafka_jmx_port: int | None = None
    postgres: Postgres | None = None
    redis: Redis | None = None
    kafka: Kafka | None = None
    nats: Nats | None = None
    nats_how: str | None = None  # embedded | external, when the stack has NATS
    jaeger: Jaeger | None = None  # with MESH_TRACING=jaeger
    bus: BusChoice | None = None
    urls: dict[str, str] = field(default_factory=dict)

    @property
    def services(self) -> list[ServiceProcess]:
        return [s for s in (self.postgres, self.redis, self.kafka, self.nats, self.jaeger)
                if s is not None]

    def plan(self) -> bus.BusPlan:
        return bus.plan_bus(self.kafka_policy, self.env, java_available())

    def plan_nats(self) -> bus.NatsPlan:
        return bus.plan_nats(self.nats_policy, self.env, nats_available())

    def start(self) -> dict[str, str]:
        """Start what the environment does not provide; return the MESH_* URLs
        (plus ``MESH_BUS=redis`` when the bus is Redis Streams).

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
        # Before anything starts: a REQUIRED Kafka or NATS that cannot run fails fast.
        plan = self.plan()
        nats_plan = self.plan_nats()
        self.root.mkdir(parents=True, exist_ok=True)
        urls: dict[str, str] = {}
        if self.env.get("MESH_DATABASE_URL"):
            urls["MESH_DATABASE_URL"] = self.env["MESH_DATABASE_URL"]
        else:
            self.postgres = Postgres(self.root / "postgres", self.ports.postgres,
                                     self.postgres_settings)
            self.postgres.start()
            urls["MESH_DATABASE_URL"] = self.postgres.url
        if self.env.get("MESH_REDIS_URL"):
            urls["MESH_REDIS_URL"] = self.env["MESH_REDIS_URL"]
        else:
            self.redis = Redis(self.root / "redis", self.ports.redis)
            self.redis.start()
            urls["MESH_REDIS_URL"] = self.redis.url
        nats_url = self._start_nats(nats_plan)
        if nats_url is not None:
            urls[NATS_URL_VAR] = nats_url
        self.bus = self._start_bus(plan)
        urls.update(self.bus.environment())
        if self.env.get(TRACING_VAR) == "jaeger":
            # Every Procfile process (and a meshd started with this environment)
            # exports its spans here (ADR 042).
            self.jaeger = Jaeger(self.root / "jaeger", self.ports.jaeger, self.ports.jaeger_otlp)
            self.jaeger.start(timeout=900.0)  # the first start builds it
            urls["OTEL_EXPORTER_OTLP_ENDPOINT"] = self.jaeger.otlp_endpoint
        self.urls = urls
        return dict(urls)

    def _start_nats(self, plan: bus.NatsPlan) -> str | None:
        if plan.external is not None:
            self.nats_how = "external"
            return plan.external
        if not plan.start:
            return None
        self.nats = Nats(self.root / "nats", self.ports.nats)
        self.nats.start()
        self.nats_how = "embedded"
        return self.nats.url

    def _start_bus(self, plan: bus.BusPlan) -> BusChoice:
        if plan.nats:
            assert self.nats_how is not None  # plan_nats required it
            url = self.nats.url if self.nats is not None else self.env[NATS_URL_VAR]
            return BusChoice("nats", self.nats_how, url, "the bus is NATS JetStream (MESH_BUS=nats)")
        if plan.external is not None:
            return BusChoice("kafka", "external", plan.external)
        if plan.fallback is not None:
            return plan.fallback
        kafka = Kafka(self.root / "kafka", self.ports.kafka, self.ports.kafka_controller,
                      jmx_port=self.kafka_jmx_port, env=self.env)
        self.kafka = kafka
        try:
            kafka.start()
        except Exception as exc:
            if not plan.degrade_on_failure:
                raise
            kafka.stop()
            self.kafka = None
            return bus.failed(str(exc), kafka.log_path)
        return BusChoice("kafka", "embedded", kafka.bootstrap)

    def stop(self) -> None:
        for service in reversed(self.services):
            try:
                service.stop()
            except Exception:  # stop the rest whatever one does
                log.exception("stopping %s failed", service.name)

    def discard(self) -> None:
        """Stop, then delete ``root``: for stacks that live in a temporary folder.

        A service that ignored its stop (or a child it forked) can still be
        writing into the folder, which makes ``rmtree`` fail with "directory
        not empty"; anything still running there is stopped before the
        folder is removed.
        """
        from devstack.leftovers import stop_leftovers

        self.stop()
        try:
            stop_leftovers(self.root, timeout=10.0)
        finally:
            remove_tree(self.root)


def remove_tree(root: Path, attempts: int = 3) -> None:
    """``rmtree`` that survives files appearing or vanishing while it runs."""
    for _ in range(attempts - 1):
        try:
            shutil.rmtree(root)
            return
        except FileNotFoundError:
            return
        except OSError:
            continue
    shutil.rmtree(root, ignore_errors=True)
    if root.exists():
        log.warning("could not remove %s entirely", root)

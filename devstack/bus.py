"""Kafka, NATS or Redis Streams: the one place that decides which bus a local stack gets.

``make run``, ``make services``, the test session and the benchmarks all start
their services through :class:`devstack.stack.Stack`, which asks :func:`plan_bus`
what to do about Kafka (:func:`plan_bus`) and NATS (:func:`plan_nats`) and
reports the outcome as a :class:`BusChoice`. Callers state a :class:`KafkaPolicy`
and a :class:`NatsPolicy`; none of them repeats the decision.

NATS is the bus only when asked for by name (``MESH_BUS=nats``): then ``make run``
starts no Kafka, and NATS is required. Tests and benchmarks start NATS beside
Kafka to run the bus suites over both.

The mesh processes themselves pick their bus from their settings (``MESH_BUS``,
``MESH_KAFKA_BOOTSTRAP``); :meth:`BusChoice.environment` is what tells them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

BOOTSTRAP_VAR = "MESH_KAFKA_BOOTSTRAP"
NATS_URL_VAR = "MESH_NATS_URL"


class KafkaPolicy(enum.Enum):
    """How much a caller insists on Kafka."""

    OFF = "off"              # --no-kafka: Redis Streams, on purpose
    FALLBACK = "fallback"    # make run: Redis Streams when Kafka cannot run or fails to start
    IF_JAVA = "if-java"      # tests, bench: Redis Streams without Java/Maven; a failing Kafka is an error
    REQUIRED = "required"    # CI: Kafka or an error

    @classmethod
    def for_tests(cls, ci: bool) -> KafkaPolicy:
        # In CI a missing Kafka must fail the run, never shrink it to Redis Streams.
        return cls.REQUIRED if ci else cls.IF_JAVA


class NatsPolicy(enum.Enum):
    """How much a caller insists on NATS."""

    OFF = "off"                    # make run without MESH_BUS=nats: no NATS
    IF_AVAILABLE = "if-available"  # tests, bench: NATS when nats-server is installed
    REQUIRED = "required"          # MESH_BUS=nats, or CI: NATS or an error

    @classmethod
    def for_tests(cls, ci: bool) -> NatsPolicy:
        # In CI a missing nats-server must fail the run, never skip the NATS tests.
        return cls.REQUIRED if ci else cls.IF_AVAILABLE

    @classmethod
    def for_run(cls, env: dict[str, str]) -> NatsPolicy:
        return cls.REQUIRED if wants_nats(env) else cls.OFF


def wants_nats(env: dict[str, str]) -> bool:
    return env.get("MESH_BUS") == "nats"


@dataclass(frozen=True)
class NatsPlan:
    """Use ``external``, start an embedded nats-server (``start``), or neither."""

    external: str | None = None
    start: bool = False


def plan_nats(policy: NatsPolicy, env: dict[str, str], binary: bool) -> NatsPlan:
    """Decide, from the policy, the environment and whether ``nats-server`` is
    installed, how the stack gets its NATS. Raises when the policy cannot be met."""
    from devstack.nats import MISSING_NATS

    if env.get(NATS_URL_VAR):
        return NatsPlan(external=env[NATS_URL_VAR])
    if policy is NatsPolicy.OFF:
        return NatsPlan()
    if not binary:
        if policy is NatsPolicy.REQUIRED:
            why = "MESH_BUS=nats" if wants_nats(env) else "CI=true"
            raise RuntimeError(f"NATS is required ({why}) but not available: it {MISSING_NATS}; "
                               f"or set {NATS_URL_VAR} to use an existing server")
        return NatsPlan()
    return NatsPlan(start=True)


@dataclass(frozen=True)
class BusChoice:
    kind: Literal["kafka", "nats", "redis"]
    how: str                 # external | embedded | off | missing | failed
    where: str               # bootstrap address, or why there is none
    note: str | None = None  # said out loud when the bus is Redis Streams

    def environment(self) -> dict[str, str]:
        """What the mesh processes need to use this bus."""
        if self.kind == "kafka":
            return {BOOTSTRAP_VAR: self.where}
        if self.kind == "nats":
            return {"MESH_BUS": "nats", NATS_URL_VAR: self.where}
        # Explicit, so a MESH_BUS=kafka left in a shell cannot point them at nothing.
        return {"MESH_BUS": "redis"}


@dataclass(frozen=True)
class BusPlan:
    """What to do before anything is started: use ``external``, start an
    embedded Kafka (``start_kafka``), or settle for ``fallback``."""

    external: str | None = None
    start_kafka: bool = False
    fallback: BusChoice | None = None
    nats: bool = False  # MESH_BUS=nats: the bus is the stack's NATS, no Kafka
    degrade_on_failure: bool = False


MISSING_JAVA = "needs `java` (17+) and `mvn` on PATH"


def plan_bus(policy: KafkaPolicy, env: dict[str, str], java: bool) -> BusPlan:
    """Decide, from the policy, the environment and whether Java and Maven are
    on PATH, how the stack gets its bus. Raises when the policy cannot be met."""
    if wants_nats(env) and policy in (KafkaPolicy.OFF, KafkaPolicy.FALLBACK):
        return BusPlan(nats=True)  # make run with MESH_BUS=nats needs no Kafka
    if env.get(BOOTSTRAP_VAR):
        return BusPlan(external=env[BOOTSTRAP_VAR])
    if policy is KafkaPolicy.OFF:
        return BusPlan(fallback=BusChoice(
            "redis", "off", "(--no-kafka)", "Kafka is off: the bus falls back to Redis Streams"))
    if not java:
        if policy is KafkaPolicy.REQUIRED:
            raise RuntimeError(f"Kafka is required (CI=true) but not available: it {MISSING_JAVA}; "
                               f"install Java 17+ and Maven, or set {BOOTSTRAP_VAR}")
        return BusPlan(fallback=BusChoice(
            "redis", "missing", MISSING_JAVA,
            "Kafka is unavailable (no Java/Maven): the bus falls back to Redis Streams "
            f"(set {BOOTSTRAP_VAR} to use an existing Kafka)"))
    return BusPlan(start_kafka=True, degrade_on_failure=policy is KafkaPolicy.FALLBACK)


def failed(reason: str, log_path: object) -> BusChoice:
    """The Redis Streams bus a FALLBACK stack gets when its Kafka did not start."""
    first_line = reason.strip().splitlines()[0] if reason.strip() else "no output"
    return BusChoice("redis", "failed", f"{first_line} (see {log_path})",
                     "Kafka did not start: the bus falls back to Redis Streams")

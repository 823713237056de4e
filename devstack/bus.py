"""Kafka or Redis Streams: the one place that decides which bus a local stack gets.

``make run``, ``make services``, the test session and the benchmarks all start
their services through :class:`devstack.stack.Stack`, which asks :func:`plan_bus`
what to do about Kafka and reports the outcome as a :class:`BusChoice`. Callers
state a :class:`KafkaPolicy`; none of them repeats the decision.

The mesh processes themselves pick their bus from their settings (``MESH_BUS``,
``MESH_KAFKA_BOOTSTRAP``); :meth:`BusChoice.environment` is what tells them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

BOOTSTRAP_VAR = "MESH_KAFKA_BOOTSTRAP"


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


@dataclass(frozen=True)
class BusChoice:
    kind: Literal["kafka", "redis"]
    how: str                 # external | embedded | off | missing | failed
    where: str               # bootstrap address, or why there is none
    note: str | None = None  # said out loud when the bus is Redis Streams

    def environment(self) -> dict[str, str]:
        """What the mesh processes need to use this bus."""
        if self.kind == "kafka":
            return {BOOTSTRAP_VAR: self.where}
        # Explicit, so a MESH_BUS=kafka left in a shell cannot point them at nothing.
        return {"MESH_BUS": "redis"}


@dataclass(frozen=True)
class BusPlan:
    """What to do before anything is started: use ``external``, start an
    embedded Kafka (``start_kafka``), or settle for ``fallback``."""

    external: str | None = None
    start_kafka: bool = False
    fallback: BusChoice | None = None
    degrade_on_failure: bool = False


MISSING_JAVA = "needs `java` (17+) and `mvn` on PATH"


def plan_bus(policy: KafkaPolicy, env: dict[str, str], java: bool) -> BusPlan:
    """Decide, from the policy, the environment and whether Java and Maven are
    on PATH, how the stack gets its bus. Raises when the policy cannot be met."""
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

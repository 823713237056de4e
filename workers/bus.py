"""The message bus between the outbox relay and the push fan-out.

One small interface, three implementations: Kafka (``workers/bus_kafka_*.py``) for
production, NATS JetStream (``workers/bus_nats_*.py``) for teams that run NATS, and
Redis Streams (:mod:`workers.bus_redis`) for embedded and small deployments. All
pass ``tests/test_bus_conformance.py``; a new bus is done when that suite passes.
This module is the contract; :mod:`workers.bus_factory` picks the implementation.
See ``docs/decisions/002-bus-interface.md``.

Contract, for every implementation:

* A record is ``(key, value)``: ``key`` is the recipient ``agent_id`` and decides
  the order domain (records with one key are delivered in publish order),
  ``value`` is the event JSON.
* :meth:`Publisher.publish_batch` never raises for a record-level or broker
  problem: it returns one result per record, in order. ``None`` means the
  broker acknowledged the record durably (Kafka: acks=all, idempotent; Redis: as
  durable as its persistence setting). An exception means *not acknowledged*:
  the record may or may not have been written, and publishing it again is safe
  because consumers drop a seq they already have. ``exc.retriable`` tells a
  transient failure (broker down, timeout) from a record the bus will never take
  (:class:`RecordRejected`, e.g. over ``max_record_bytes``).
* When the broker is unreachable every record fails after at most about
  ``publish_timeout`` seconds; the publisher reconnects by itself afterwards.
* Delivery is at-least-once. :meth:`Subscriber.commit` marks deliveries done;
  anything fetched and not committed is redelivered to the group after this
  subscriber stops or dies (Kafka: when its partitions are reassigned; Redis: once
  the entry has been pending for ``claim_idle`` seconds). Commit in fetch order:
  on Kafka a commit covers every earlier delivery of the same partition.
* Outages after :meth:`start` never raise from ``publish_batch``/``fetch``/
  ``commit``: they show as failed records, empty fetches and (logged) lost
  commits, which only cause redelivery.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from app.platform.settings import Settings


# The record header that carries a message's trace (app.platform.tracing.TRACEPARENT).
TRACE_HEADER = "traceparent"


class PublishError(Exception):
    """A record was not acknowledged by the bus. Publishing it again is safe."""

    retriable: bool = True


class BusUnavailable(PublishError):
    """The broker could not be reached or did not answer within the timeout."""


class RecordRejected(PublishError):
    """The bus will never accept this record (e.g. it is too large): dead-letter it."""

    retriable = False


class BusStartError(Exception):
    """``start()`` could not reach the broker or prepare the topic/stream."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One record handed to a subscriber. ``partition``/``offset`` say where it
    sits on the bus (Kafka partition and offset; for Redis ``0`` and the stream
    entry id) and are what :meth:`Subscriber.commit` needs."""

    key: str
    value: bytes
    partition: int
    offset: int | str
    # The message's trace, from the record's headers (None when it had none).
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class KafkaOptions:
    """What only the Kafka bus reads."""

    # Partitions and replication of the topic when we create it.
    partitions: int = 8
    replication_factor: int = 1
    # "PLAINTEXT" or "SSL".
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class NatsOptions:
    """What only the NATS JetStream bus reads."""

    # How long the stream remembers a Nats-Msg-Id and drops a repeat.
    # BusOptions.from_settings() sets it above the relay's retry horizon; this
    # default (2 h) is above the horizon of the default settings (95 min).
    duplicate_window: float = 7200.0
    # Unacked messages the push consumer group may hold at once.
    max_ack_pending: int = 20_000


@dataclass(frozen=True, slots=True)
class BusOptions:
    """Knobs with safe defaults; tests shorten the timeouts. The top-level ones
    mean the same on every bus; ``kafka`` and ``nats`` hold the rest."""

    # Upper bound for one publish_batch call while the broker is unreachable.
    publish_timeout: float = 10.0
    # Bound for start(): connecting and creating the topic/stream/group.
    connect_timeout: float = 10.0
    # key + value bytes. A little over the 1 MiB HTTP body limit, so that any
    # event built from an accepted request fits (the event JSON wraps the body).
    max_record_bytes: int = 2 * 1024 * 1024
    # Redis and NATS: approximate bound on the records the stream keeps.
    # Trimming drops the oldest even if unread; Postgres stays the history, so
    # this only bounds memory.
    stream_maxlen: int = 1_000_000
    # Redis and NATS: a delivery unacked this long is redelivered (Redis
    # reclaims it, NATS's ack wait), so a killed consumer's work comes back.
    # Keep it above the longest time a live consumer holds a fetched batch.
    claim_idle: float = 60.0
    # Redis and NATS: how often fetch() looks for such deliveries.
    claim_interval: float = 5.0
    kafka: KafkaOptions = KafkaOptions()
    nats: NatsOptions = NatsOptions()

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: object) -> BusOptions:
        """The options the deployment configures (MESH_*); the rest keep their defaults."""
        values: dict[str, object] = {
            "max_record_bytes": settings.bus_max_record_bytes,
            "kafka": KafkaOptions(security_protocol=settings.kafka_security_protocol),
            "nats": NatsOptions(duplicate_window=duplicate_window(
                settings.relay_retry_base_seconds, settings.relay_max_attempts)),
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]


# Added to the retry horizon: publish timeouts and the relay's bus back-off
# (capped at 15 s) between attempts, with room to spare.
DUPLICATE_WINDOW_MARGIN = 600.0


def retry_horizon(base_seconds: float, max_attempts: int) -> float:
    """Longest time between the first and the last publish of one outbox row:
    the sum of its back-offs ``base·2^attempts``. Counted for every attempt up
    to ``max_attempts`` (the last one dead-letters instead of waiting), so this
    errs long. Defaults: 5 s · (2^10 − 1) = 5,115 s."""
    return base_seconds * (2 ** max_attempts - 1)


def duplicate_window(base_seconds: float, max_attempts: int) -> float:
    """The NATS stream's duplicate window: the retry horizon plus a margin, so a
    row republished by any retry is still recognised (defaults: 5,715 s)."""
    return retry_horizon(base_seconds, max_attempts) + DUPLICATE_WINDOW_MARGIN


class Publisher(Protocol):
    async def start(self) -> None:
        """Connect and make sure the topic/stream exists. Raises :class:`BusStartError`."""

    async def stop(self) -> None:
        """Release connections; bounded even while the broker is down."""

    async def publish_batch(
        self, records: Sequence[tuple[str, bytes]], msg_ids: Sequence[str] | None = None,
        traceparents: Sequence[str | None] | None = None,
    ) -> list[PublishError | None]:
        """Publish ``(key, value)`` records; one result per record, in order
        (``None`` = acknowledged). Never raises for broker or record problems.
        ``msg_ids`` (one per record: the outbox row id) lets a bus with
        broker-side dedup (NATS) store a republished record once; others ignore it.
        ``traceparents`` (one per record, or None) travel as the record's
        ``traceparent`` header and come back as :attr:`Delivery.traceparent`."""
        ...


class Subscriber(Protocol):
    async def start(self) -> None:
        """Join the consumer group (creating topic/stream/group if missing).
        Raises :class:`BusStartError`."""

    async def stop(self) -> None:
        """Leave the group; uncommitted deliveries go back to the group."""

    async def fetch(self, max_records: int, wait: float) -> list[Delivery]:
        """Long-poll: return up to ``max_records`` as soon as any are there, or
        ``[]`` after ``wait`` seconds (also while the broker is unreachable)."""
        ...

    async def commit(self, deliveries: Sequence[Delivery]) -> None:
        """Mark deliveries done so the group never redelivers them. A commit the
        broker refuses (rebalance, outage) is logged, not raised: those records
        are simply delivered again."""


def record_too_large(key: str, value: bytes, limit: int) -> RecordRejected | None:
    """The size rule both buses share, checked before anything is sent."""
    size = len(key.encode()) + len(value)
    if size > limit:
        return RecordRejected(
            f"record for key {key!r} is {size} bytes, over the bus limit of {limit} bytes "
            "(BusOptions.max_record_bytes); it can never be published"
        )
    return None

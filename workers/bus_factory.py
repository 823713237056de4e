"""The bus implementation a deployment configures (``MESH_BUS``): the one place
that knows all three, so the contract (:mod:`workers.bus`) imports none of them."""

from __future__ import annotations

from app.platform.settings import Settings
from workers.bus import BusOptions, Publisher, Subscriber
from workers.bus_kafka_publisher import KafkaPublisher
from workers.bus_kafka_subscriber import KafkaSubscriber
from workers.bus_nats_publisher import NatsPublisher
from workers.bus_nats_subscriber import NatsSubscriber
from workers.bus_redis import RedisPublisher, RedisSubscriber


def create_publisher(settings: Settings, options: BusOptions | None = None) -> Publisher:
    """The publisher for ``settings.bus_kind`` on ``settings.bus_topic``. Call ``start()``."""
    options = options or BusOptions.from_settings(settings)
    if settings.bus_kind == "nats":
        return NatsPublisher(_nats_url(settings), settings.bus_topic, options)
    if settings.bus_kind == "kafka":
        if not settings.kafka_bootstrap:
            raise ValueError("bus is 'kafka' but MESH_KAFKA_BOOTSTRAP is not set")
        return KafkaPublisher(settings.kafka_bootstrap, settings.bus_topic, options)
    return RedisPublisher(settings.redis_url, settings.bus_topic, options)


def create_subscriber(
    settings: Settings, group: str, consumer_name: str, options: BusOptions | None = None
) -> Subscriber:
    """A member ``consumer_name`` of consumer ``group`` on ``settings.bus_topic``.
    ``consumer_name`` should be unique per process (e.g. host + pid)."""
    options = options or BusOptions.from_settings(settings)
    if settings.bus_kind == "nats":
        return NatsSubscriber(_nats_url(settings), settings.bus_topic, group, consumer_name,
                              options)
    if settings.bus_kind == "kafka":
        if not settings.kafka_bootstrap:
            raise ValueError("bus is 'kafka' but MESH_KAFKA_BOOTSTRAP is not set")
        return KafkaSubscriber(
            settings.kafka_bootstrap, settings.bus_topic, group, consumer_name, options
        )
    return RedisSubscriber(settings.redis_url, settings.bus_topic, group, consumer_name, options)


def _nats_url(settings: Settings) -> str:
    if not settings.nats_url:
        raise ValueError("bus is 'nats' but MESH_NATS_URL is not set")
    return settings.nats_url

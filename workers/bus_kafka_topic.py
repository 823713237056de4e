"""What every Kafka client of the bus shares: how it connects, and the topic.

Whichever side starts first creates the topic, so the publisher and the
subscriber both call :func:`ensure_topic`. The topic's ``max.message.bytes``
is set just above ``max_record_bytes`` and read back, because the publisher
must never send a record the broker would refuse (see
:mod:`workers.bus_kafka_publisher`).
"""

from __future__ import annotations

from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from workers.bus import BusOptions, KafkaOptions

# What a batch and record header add to key + value on the wire (61-byte batch
# header plus varints); headroom so a record of exactly max_record_bytes fits.
RECORD_OVERHEAD = 1024
_NO_ERROR = 0


def connection_options(options: KafkaOptions) -> dict[str, Any]:
    """TLS settings shared by every Kafka client we build."""
    if options.security_protocol == "SSL":
        from aiokafka.helpers import create_ssl_context

        return {"security_protocol": "SSL", "ssl_context": create_ssl_context()}
    return {"security_protocol": "PLAINTEXT"}


async def ensure_topic(bootstrap: str, topic: str, options: BusOptions) -> int | None:
    """Create ``topic`` unless it exists; return its ``max.message.bytes`` (None if unknown)."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(options.connect_timeout * 1000),
        **connection_options(options.kafka),
    )
    try:
        await admin.start()
        response = await admin.create_topics([
            NewTopic(
                topic,
                options.kafka.partitions,
                options.kafka.replication_factor,
                topic_configs={
                    "max.message.bytes": str(options.max_record_bytes + RECORD_OVERHEAD)
                },
            )
        ])
        for name, code, *message in response.topic_errors:
            if code not in (_NO_ERROR, TopicAlreadyExistsError.errno):
                raise KafkaError(f"creating topic {name!r} failed: error {code} {message}")
        described = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {"max.message.bytes": None})]
        )
        for _code, _msg, _type, _name, entries in described[0].resources:
            for config_name, value, *_ in entries:
                if config_name == "max.message.bytes" and value:
                    return int(value)
        return None
    finally:
        await admin.close()

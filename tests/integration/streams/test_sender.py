"""The worker's output sender against the real broker: an acknowledged batch flushes, a rejected
send fails the flush (the worker then exits without acking its batch).

The sender asks librdkafka for delivery reports of failures only, so these tests are what shows
that a failure still reaches ``flush()``.
"""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Consumer

from olstream.shared.errors import DeliveryError
from olstream.shared.kafka_admin import ensure_topic
from olstream.streams.runtime.sender import Sender

pytestmark = pytest.mark.integration

MAX_MESSAGE_BYTES = 2048


def _count(bootstrap: str, topic: str, group: str, expected: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = 0
    try:
        for _ in range(60):
            seen += sum(1 for m in consumer.consume(1000, timeout=0.5) if m.error() is None)
            if seen >= expected:
                break
    finally:
        consumer.close()
    return seen


def test_flush_returns_once_every_send_is_acknowledged(
    kafka_bootstrap: str, unique_topic: str, unique_group: str
) -> None:
    ensure_topic(kafka_bootstrap, unique_topic, 3)
    sender = Sender(kafka_bootstrap)
    for i in range(500):
        sender.send(unique_topic, f"run:ns/job{i % 7}".encode(), b"x" * 100)
    asyncio.run(sender.flush(30))
    assert _count(kafka_bootstrap, unique_topic, unique_group, 500) == 500
    sender.close()


def test_a_send_the_broker_rejects_fails_the_flush(kafka_bootstrap: str, unique_topic: str) -> None:
    ensure_topic(kafka_bootstrap, unique_topic, 1, {"max.message.bytes": str(MAX_MESSAGE_BYTES)})
    sender = Sender(kafka_bootstrap)
    sender.send(unique_topic, b"k", b"small")
    sender.send(unique_topic, b"k", b"x" * (MAX_MESSAGE_BYTES * 4))  # over the topic's limit
    sender.send(unique_topic, b"k", b"small again")
    with pytest.raises(DeliveryError, match="an output send failed"):
        asyncio.run(sender.flush(30))
    # the failure stays: a later flush of good sends must not hide it
    sender.send(unique_topic, b"k", b"after")
    with pytest.raises(DeliveryError):
        asyncio.run(sender.flush(30))

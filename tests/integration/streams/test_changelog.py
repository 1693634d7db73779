"""The run-state table's changelog writer against the real broker: every write, delete and value in
its partition, each flush answering the offset after the highest acknowledged write of each
partition written since the last one (what the run store keeps), and a write the broker refuses
failing the flush."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Consumer, TopicPartition

from olstream.shared.errors import DeliveryError
from olstream.shared.kafka_admin import ensure_topic
from olstream.streams.runtime.changelog import ChangelogWriter

pytestmark = pytest.mark.integration

MAX_MESSAGE_BYTES = 2048


def _read(
    bootstrap: str, topic: str, group: str, partition: int, expected: int
) -> list[tuple[bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[tuple[bytes, bytes | None]] = []
    try:
        for _ in range(60):
            out += [(m.key(), m.value()) for m in consumer.consume(1000, timeout=0.5) if m.error() is None]
            if len(out) >= expected:
                break
    finally:
        consumer.close()
    return out


def test_writes_and_deletes_land_in_their_partition_and_each_flush_answers_the_next_offsets(
    kafka_bootstrap: str, unique_topic: str, unique_group: str
) -> None:
    ensure_topic(kafka_bootstrap, unique_topic, 3)
    writer = ChangelogWriter(kafka_bootstrap, unique_topic)
    for i in range(30):
        writer.send(i % 3, f"0:run-{i}".encode(), f"state-{i}".encode())
    assert asyncio.run(writer.flush(30)) == {p: 10 for p in range(3)}  # offsets 0..9 in each

    writer.send(1, b"0:run-1", None)  # a delete: a tombstone
    writer.send(1, b"hwm:1:0", b"mark")
    assert asyncio.run(writer.flush(30)) == {1: 12}  # nothing new in 0 and 2

    assert asyncio.run(writer.flush(30)) == {}  # nothing written since: nothing to wait for

    rows = _read(kafka_bootstrap, unique_topic, unique_group, 1, 12)
    assert rows[:10] == [(f"0:run-{i}".encode(), f"state-{i}".encode()) for i in range(1, 30, 3)]
    assert rows[10:] == [(b"0:run-1", None), (b"hwm:1:0", b"mark")]
    writer.close()


def test_a_write_the_broker_refuses_fails_the_flush(kafka_bootstrap: str, unique_topic: str) -> None:
    ensure_topic(kafka_bootstrap, unique_topic, 1, {"max.message.bytes": str(MAX_MESSAGE_BYTES)})
    writer = ChangelogWriter(kafka_bootstrap, unique_topic)
    writer.send(0, b"k", b"small")
    writer.send(0, b"k", b"x" * (MAX_MESSAGE_BYTES * 4))  # over the topic's limit
    with pytest.raises(DeliveryError, match=r"changelog write .* failed"):
        asyncio.run(writer.flush(30))

"""Both Kafka clients the project uses work against the project's broker (the version matrix proof).

Run against another Kafka version with OLSTREAM_KAFKA_VERSION=3.9.1 (and OLSTREAM_BOOTSTRAP unset).
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as Tp

from olstream.devkit.kafka_config import DEFAULT_KAFKA_VERSION, kafka_major
from tests.support.stop_support import committed_offsets

pytestmark = pytest.mark.integration

MESSAGES = 20


def _produce_confluent(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for i in range(count):
        producer.produce(topic, key=f"k{i % 3}".encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0


def _consume_confluent(bootstrap: str, topic: str, group: str, protocol: str, count: int) -> list[bytes]:
    config: dict[str, str | bool | int] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "consumer":
        config["group.protocol"] = "consumer"
    consumer = Consumer(config)
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value() or b"")
        consumer.commit(asynchronous=False)
        committed = consumer.committed([*consumer.assignment()], timeout=10)
        assert sum(tp.offset for tp in committed if tp.offset >= 0) == count
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_confluent_kafka_produce_consume_and_commit(
    kafka_bootstrap: str, make_topic: object, unique_group: str, protocol: str
) -> None:
    if (
        protocol == "consumer"
        and kafka_major(os.environ.get("OLSTREAM_KAFKA_VERSION", DEFAULT_KAFKA_VERSION)) < 4
    ):
        pytest.skip("KIP-848 consumer groups need a Kafka 4.x broker")
    topic = make_topic(partitions=3)  # type: ignore[operator]
    _produce_confluent(kafka_bootstrap, topic, MESSAGES)
    values = _consume_confluent(kafka_bootstrap, topic, unique_group, protocol, MESSAGES)
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(MESSAGES))


async def _aiokafka_round_trip(bootstrap: str, topic: str, group: str) -> list[bytes]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(MESSAGES):
            await producer.send_and_wait(topic, key=f"k{i % 3}".encode(), value=f"a{i}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(values) < MESSAGES and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                values.extend(r.value or b"" for r in records)
        await consumer.commit()
        total = 0
        for partition in consumer.assignment():
            total += await consumer.committed(TopicPartition(topic, partition.partition)) or 0
        assert total == MESSAGES
    finally:
        await consumer.stop()
    return values


def test_aiokafka_produce_consume_and_commit(
    kafka_bootstrap: str, make_topic: object, unique_group: str
) -> None:
    topic = make_topic(partitions=3)  # type: ignore[operator]
    values = asyncio.run(_aiokafka_round_trip(kafka_bootstrap, topic, unique_group))
    assert sorted(values) == sorted(f"a{i}".encode() for i in range(MESSAGES))


def test_confluent_reads_what_aiokafka_wrote(
    kafka_bootstrap: str, make_topic: object, unique_group: str
) -> None:
    topic = make_topic(partitions=1)  # type: ignore[operator]

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, value=f"x{i}".encode())
        finally:
            await producer.stop()

    asyncio.run(produce())
    values = _consume_confluent(kafka_bootstrap, topic, unique_group, "classic", 5)
    assert values == [f"x{i}".encode() for i in range(5)]


def test_committed_offsets_answer_while_a_killed_workers_transaction_is_still_open(
    kafka_bootstrap: str, make_topic: object, unique_group: str
) -> None:
    """The tests' offset reader (stop_support.committed_offsets) answers at once with the last committed
    offsets while a transaction holding the group's offsets is open, as a worker killed mid-transaction
    leaves it; a read_committed `committed()` waits for stable offsets until it times out."""
    topic = make_topic(1)  # type: ignore[operator]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{unique_group}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"v")
    group = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_group})
    try:
        producer.send_offsets_to_transaction([Tp(topic, 0, 1)], group.consumer_group_metadata(), 30)
        started = time.monotonic()
        assert committed_offsets(kafka_bootstrap, unique_group, topic) == [-1001]
        assert time.monotonic() - started < 5
        with pytest.raises(KafkaException, match="Timed out"):
            group.committed([Tp(topic, 0)], timeout=2)  # read_committed, librdkafka's default
        producer.commit_transaction(30)
        assert committed_offsets(kafka_bootstrap, unique_group, topic) == [1]
    finally:
        group.close()

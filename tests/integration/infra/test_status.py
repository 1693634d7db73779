"""`olstream status` against a real broker: end offsets and a group's lag."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from olstream.infra.status import collect

pytestmark = pytest.mark.integration


def test_end_offsets_and_lag_of_a_group(
    kafka_bootstrap: str, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce(topic, value=b"x", partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    finally:
        consumer.close()

    status = collect(kafka_bootstrap, (topic, "olstream-status-missing-topic"))

    (ends,) = status.topics
    assert (ends.topic, ends.partitions, ends.end_offsets) == (topic, 2, (3, 2))
    assert status.missing_topics == ("olstream-status-missing-topic",)
    (lag,) = [g for g in status.groups if g.group == unique_group]
    assert (lag.committed, lag.end, lag.lag, lag.partitions_without_commit) == (2, 5, 3, 1)
    state = status.state_of(unique_group)
    assert state is not None and state.members == 0

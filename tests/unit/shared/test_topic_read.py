"""`olstream.shared.topic_read.messages_to_end`: a fixed range read to its end, outside any group."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from olstream.shared.errors import InfrastructureError
from olstream.shared.topic_read import messages_to_end
from tests.support.fake_message import FakeMessage


class FakeConsumer:
    """Hands out `batches` in turn, then empty ones; `positions` answers position()."""

    def __init__(self, batches: list[list[FakeMessage]], positions: dict[int, int] | None = None) -> None:
        self.batches = batches
        self.positions = positions or {}
        self.assigned: list[tuple[int, int]] = []

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned = [(tp.partition, tp.offset) for tp in tps]

    def consume(self, _n: int, _wait: float) -> list[FakeMessage]:
        return self.batches.pop(0) if self.batches else []

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions.get(tp.partition, -1001)) for tp in tps]


def read(consumer: Any, spans: dict[int, tuple[int, int]], **kw: Any) -> list[tuple[int, int]]:
    kw.setdefault("deadline", float("inf"))
    got = messages_to_end(consumer, "t", spans, batch=10, wait=0.0, **kw)
    return [(p, o) for p, o, _ in got]


def test_each_message_below_its_end_in_order_and_empty_spans_not_assigned() -> None:
    eof = FakeMessage(0, 2, error=KafkaError(KafkaError._PARTITION_EOF))
    consumer = FakeConsumer(
        [[FakeMessage(0, 0), FakeMessage(1, 5), eof], [FakeMessage(0, 1), FakeMessage(0, 2)]]
    )
    assert read(consumer, {0: (0, 2), 1: (5, 6), 2: (3, 3)}) == [(0, 0), (1, 5), (0, 1)]
    assert consumer.assigned == [(0, 0), (1, 5)]


def test_a_range_ending_in_a_transaction_marker_ends_by_position() -> None:
    consumer = FakeConsumer([[FakeMessage(0, 0)]], positions={0: 2})
    assert read(consumer, {0: (0, 2)}) == [(0, 0)]


def test_nothing_to_read_assigns_nothing() -> None:
    consumer = FakeConsumer([])
    assert read(consumer, {0: (4, 4)}) == [] and consumer.assigned == []


def test_a_consume_error_and_a_missed_deadline_are_infrastructure_errors() -> None:
    failed = FakeMessage(0, 0, error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied"))
    with pytest.raises(InfrastructureError, match="reading t: denied"):
        read(FakeConsumer([[failed]]), {0: (0, 1)}, error_text=KafkaError.str)
    with pytest.raises(InfrastructureError, match=r"reading t: partitions \[0\] did not reach their end"):
        read(FakeConsumer([]), {0: (0, 1)}, deadline=0.0)

"""`olstream_sink_lag`: high watermark minus what the group committed, never minus the read position."""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from olstream.connectors.sink.delivery import PendingEvent
from olstream.connectors.sink.lag import LAG
from olstream.connectors.sink.settings import SinkSettings
from olstream.connectors.sink.sink import Sink
from olstream.connectors.sink.transports import ConsoleTransport
from tests.support.fake_message import FakeMessage

OFFSET_INVALID = -1001


class FakeConsumer:
    """Watermarks, the group's committed offsets and commits of one topic, as the broker has them."""

    def __init__(self, low: dict[int, int], high: dict[int, int], committed: dict[int, int]) -> None:
        self.low, self.high, self.group = low, high, committed
        self.cached_high: dict[int, int] = {}  # what the last fetch of a partition brought
        self.queries = 0

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        if cached:
            return (OFFSET_INVALID, self.cached_high.get(tp.partition, OFFSET_INVALID))
        self.queries += 1
        return (self.low[tp.partition], self.high[tp.partition])

    def committed(
        self, partitions: list[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        return [
            TopicPartition(p.topic, p.partition, self.group.get(p.partition, OFFSET_INVALID))
            for p in partitions
        ]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, OFFSET_INVALID) for p in partitions]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        for tp in offsets:
            self.group[tp.partition] = tp.offset

    def pause(self, partitions: list[TopicPartition]) -> None: ...

    def resume(self, partitions: list[TopicPartition]) -> None: ...


def key_of(offset: int) -> bytes:
    return f"run:ns/job-{offset % 3}".encode()


def message(partition: int, offset: int) -> FakeMessage:
    return FakeMessage(partition, offset, key=key_of(offset), value=b"{}")


def lag() -> float:
    return float(LAG._value.get())


def make_sink(consumer: FakeConsumer) -> Sink:
    sink = Sink(SinkSettings(transport="console"), ConsoleTransport(), consumer, None)  # type: ignore[arg-type]
    sink.on_assign(consumer, [TopicPartition("t", p) for p in (0, 1, 2)])  # type: ignore[arg-type]
    return sink


def test_before_the_first_commit_lag_counts_from_where_the_group_started() -> None:
    # p0: never committed, starts at its low watermark 5; p1: the group committed 40 before this
    # assignment; p2: committed 10 but not fetched yet (paused by a backoff before its first fetch)
    consumer = FakeConsumer(low={0: 5, 1: 0, 2: 0}, high={0: 105, 1: 90, 2: 30}, committed={1: 40, 2: 10})
    sink = make_sink(consumer)
    for offset in range(5, 105):  # the sink read all of p0 ahead of delivery
        sink._admit(message(0, offset))  # type: ignore[arg-type]
    for offset in range(40, 90):
        sink._admit(message(1, offset))  # type: ignore[arg-type]
    consumer.cached_high = {0: 105, 1: 90}
    sink._update_lag()
    assert sink.trackers[("t", 0)].outstanding == 100  # read to the end: the old gauge said 0 here
    assert lag() == 100 + 50 + 20

    # nothing delivered, the topic grows while every partition is paused: the broker's end counts
    sink.pauses.paused = {("t", 0), ("t", 1), ("t", 2)}
    consumer.high = {0: 125, 1: 90, 2: 31}
    sink._update_lag()
    assert lag() == 120 + 50 + 21

    # resumed: until the next fetch the cached ends are behind the broker's, and do not count less
    sink.pauses.paused = set()
    sink._update_lag()
    assert lag() == 120 + 50 + 21


def test_after_delivery_and_commit_the_lag_is_zero() -> None:
    consumer = FakeConsumer(low={0: 0, 1: 0, 2: 0}, high={0: 10, 1: 4, 2: 0}, committed={})
    sink = make_sink(consumer)
    for p, count in ((0, 10), (1, 4)):
        for offset in range(count):
            sink._admit(message(p, offset))  # type: ignore[arg-type]
    consumer.cached_high = {0: 10, 1: 4}
    sink._update_lag()
    assert lag() == 14
    for p, count in ((0, 10), (1, 4)):
        for offset in range(count):
            sink._finish(PendingEvent("t", p, offset, key_of(offset), b"{}", sink.epochs[("t", p)]))
    assert sink.commit_finished() and consumer.group == {0: 10, 1: 4}
    sink._update_lag()
    assert lag() == 0


def test_consumed_partitions_use_the_cached_end_and_ask_the_broker_nothing() -> None:
    consumer = FakeConsumer(low={0: 0, 1: 0, 2: 0}, high={0: 3, 1: 3, 2: 3}, committed={0: 0, 1: 0, 2: 0})
    sink = make_sink(consumer)
    for p in (0, 1, 2):
        for offset in range(3):
            sink._admit(message(p, offset))  # type: ignore[arg-type]
    consumer.cached_high = {0: 3, 1: 3, 2: 3}
    sink._update_lag()
    assert lag() == 9 and consumer.queries == 0


class SilentBroker(FakeConsumer):
    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> Any:
        if cached:
            return super().get_watermark_offsets(tp, timeout, cached)
        self.queries += 1
        return None  # timed out


def test_a_broker_that_does_not_answer_is_asked_once_per_round() -> None:
    consumer = SilentBroker(low={0: 0, 1: 0, 2: 0}, high={0: 9, 1: 9, 2: 9}, committed={0: 0, 1: 0, 2: 0})
    sink = make_sink(consumer)
    sink.pauses.paused = {("t", 0), ("t", 1), ("t", 2)}
    sink._update_lag()
    assert consumer.queries == 1

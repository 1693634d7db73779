"""The sink's commits pass offsets its consumer never delivered (transaction markers, aborted records):
`ContiguousCommitTracker.passed` and `pass_undelivered` (connectors/sink/delivery.py)."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from olstream.connectors.sink.delivery import ContiguousCommitTracker, pass_undelivered


class Positions:
    """The consumer's positions, as librdkafka answers them (OFFSET_INVALID before any fetch)."""

    def __init__(self, positions: dict[tuple[str, int], int]) -> None:
        self.positions = positions
        self.asked: list[list[tuple[str, int]]] = []

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        self.asked.append([(tp.topic, tp.partition) for tp in tps])
        return [TopicPartition(tp.topic, tp.partition, self.positions[tp.topic, tp.partition]) for tp in tps]


def test_an_idle_partition_commits_its_position_past_the_markers() -> None:
    tracker = ContiguousCommitTracker()
    for offset in (0, 1):
        tracker.add(offset)
        tracker.finish(offset)
    assert tracker.committable() == 2
    tracker.mark_committed(2)
    tracker.passed(3)  # the commit marker at offset 2
    assert tracker.committable() == 3


def test_a_partition_with_events_pending_commits_only_its_finished_prefix() -> None:
    tracker = ContiguousCommitTracker()
    tracker.add(0)
    tracker.add(1)
    tracker.finish(0)
    trackers = {("t", 0): tracker}
    consumer = Positions({("t", 0): 5})
    pass_undelivered(consumer, trackers)
    assert consumer.asked == []  # busy partitions are not even asked
    assert tracker.committable() == 1


def test_a_position_never_moves_a_commit_back_and_an_unknown_one_is_ignored() -> None:
    idle, fresh = ContiguousCommitTracker(), ContiguousCommitTracker()
    idle.add(7)
    idle.finish(7)
    trackers = {("t", 0): idle, ("t", 1): fresh}
    pass_undelivered(Positions({("t", 0): 4, ("t", 1): -1001}), trackers)
    assert idle.committable() == 8
    assert fresh.committable() is None

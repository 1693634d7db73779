"""The sink's offset commits: which offsets, the commit itself, and whether the topic is done.

`commit_offsets` and `consumed_to_end_of` wait on the broker: the sink runs them on its Kafka
thread (`kafka_calls`), the commit inside a revocation too (the callback runs there).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from olstream.connectors.sink.delivery import ContiguousCommitTracker
from olstream.shared.idle import consumed_to_end

log = logging.getLogger(__name__)

TP = tuple[str, int]
Trackers = Mapping[TP, ContiguousCommitTracker]
END_QUERY_TIMEOUT = 10.0  # s for each partition's ends and committed offset, asked when the sink is idle


def finished_offsets(
    trackers: Trackers, metadata: Mapping[TP, str], only: Collection[TP] | None
) -> list[TopicPartition]:
    """Each owned partition's finished prefix not committed yet (of `only`, when given)."""
    offsets = []
    for tp, tracker in trackers.items():
        offset = tracker.committable()
        if offset is not None and (only is None or tp in only):  # each commit keeps its metadata
            offsets.append(TopicPartition(*tp, offset, metadata=metadata.get(tp, "")))
    return offsets


def commit_offsets(consumer: Any, offsets: list[TopicPartition]) -> bool:
    """Commit and wait for the broker's answer; False (logged, tried again later) when it fails."""
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as e:
        log.warning("offset commit failed (will retry): %s", e)
        return False
    return True


def mark_committed(trackers: Trackers, offsets: list[TopicPartition]) -> None:
    for tp_offset in offsets:
        owned = trackers.get((tp_offset.topic, tp_offset.partition))
        if owned is not None:
            owned.mark_committed(tp_offset.offset)


def consumed_to_end_of(consumer: Any, trackers: Trackers) -> bool:
    """True when the group's position on every partition of `trackers` is at its end."""
    for tp, tracker in list(trackers.items()):  # one at a time: the first one behind ends it
        bounds = consumer.get_watermark_offsets(TopicPartition(*tp), timeout=END_QUERY_TIMEOUT, cached=False)
        position = tracker.committed  # past transaction markers too (`pass_undelivered`)
        if position is None:
            position = consumer.committed([TopicPartition(*tp)], timeout=END_QUERY_TIMEOUT)[0].offset
        if not consumed_to_end({tp: bounds}, {tp: position}):
            return False
    return True

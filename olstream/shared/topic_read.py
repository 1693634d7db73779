"""Reading a topic's partitions from given offsets to given ends, outside any consumer group.

`errors`, `explain` and `replay` read a range of a topic that is fixed when they start: its end
offsets then, not whatever arrives while they read. The consumer is assigned (no group joined,
nothing committed) and every message below its partition's end is handed over in order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from olstream.shared.errors import InfrastructureError


def messages_to_end(
    consumer: Consumer,
    topic: str,
    spans: Mapping[int, tuple[int, int]],
    *,
    batch: int,
    wait: float,
    deadline: float,
    quiet: float | None = None,
    error_text: Callable[[KafkaError], str] = str,
) -> Iterator[tuple[int, int, Message]]:
    """Each message of `spans` (partition -> [start, end) offsets) as (partition, offset, message),
    each partition's in order.

    `consumer.consume(batch, wait)` fetches them. InfrastructureError for a consume error (`error_text`
    of it) and once `time.monotonic()` passes `deadline` with partitions short of their end (with
    `quiet`: only when nothing came for that many seconds either).
    """
    ends = {p: end for p, (start, end) in spans.items() if end > start}
    if not ends:
        return
    consumer.assign([TopicPartition(topic, p, spans[p][0]) for p in ends])
    quiet_since = time.monotonic()
    while ends:
        now = time.monotonic()
        if now > deadline and (quiet is None or now - quiet_since > quiet):
            raise InfrastructureError(f"reading {topic}: partitions {sorted(ends)} did not reach their end")
        messages = consumer.consume(batch, wait)
        if messages:
            quiet_since = time.monotonic()
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise InfrastructureError(f"reading {topic}: {error_text(err)}")
            part, offset = msg.partition(), msg.offset()
            end = None if part is None else ends.get(part)
            if part is None or end is None or offset is None:
                continue
            if offset >= end:  # read past the range (after a transaction's marker)
                del ends[part]
                continue
            yield part, offset, msg
            if offset + 1 >= end:
                del ends[part]
        if ends:  # a transactional topic ends in markers that are never delivered: the position passes them
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]

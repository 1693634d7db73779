"""One message handed to a confluent-kafka producer, waiting while librdkafka's queue is full.

`Producer.produce` raises BufferError when `queue.buffering.max.messages` are queued and not yet
acknowledged: the broker is slow or away. Serving delivery reports (`poll`) frees room, so the
message is produced again after each wait. `wait` decides how a caller waits (and whether it
still wants to): the default polls for 50 ms; a caller that may be asked to stop returns False.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaError, Message, Producer

ANY_PARTITION = -1
"""librdkafka's RD_KAFKA_PARTITION_UA, `produce`'s own default: the partitioner chooses, by key."""

ROOM_POLL_SECONDS = 0.05
"""How long one wait for room serves delivery reports: short, so a stop request is seen soon."""


def produce(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, str | bytes | None]] | None = None,
    partition: int | None = None,
    on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
    *,
    wait: Callable[[], bool] | None = None,
) -> bool:
    """Queue one message; while the queue is full, `wait()` and try again (by default: poll 50 ms).

    False when `wait()` returned False (the caller was asked to stop): the message was not queued.
    """
    where = ANY_PARTITION if partition is None else partition
    while True:
        try:
            if on_delivery is None:  # the producer's own on_delivery, if it has one
                producer.produce(topic, value, key, where, headers=headers)
            else:
                producer.produce(topic, value, key, where, on_delivery=on_delivery, headers=headers)
            return True
        except BufferError:
            if wait is None:
                producer.poll(ROOM_POLL_SECONDS)
            elif not wait():
                return False

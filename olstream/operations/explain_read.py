"""The Kafka reads of `olstream explain`: topics scanned in parallel, committed offsets read, no group moved.

Every read assigns partitions to consumers that never join their group (`assign`, never
`subscribe`), never commit (`enable.auto.commit=false`, no offset store) and are closed at the
end. A scan reads each partition from a start offset (its low watermark, or the first offset at or
after a time: `ListOffsets` by timestamp) to the end offset it had when the scan began. The
partitions are split over a few consumers, each in its own thread; each partition's messages go,
in order, to that partition's `Collector`, which filters cheaply (a substring of the raw value, a
key) before it decodes anything.

Committed offsets of groups are read with the AdminClient (`ListConsumerGroupOffsets`): reading
them neither joins the group nor changes them.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from olstream.shared.errors import ConfigError, InfrastructureError
from olstream.shared.kafka_admin import admin_client
from olstream.shared.kafka_clients import Kafka, consumer_config

log = logging.getLogger(__name__)

BATCH = 10_000
"""Messages one `consume` call returns at most."""


class Collector(Protocol):
    """Takes one partition's messages in offset order (a confluent-kafka `Message`); keeps what it wants."""

    def offer(self, message: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class Span:
    """Offsets [start, end) of one partition to read."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class ScanCost:
    """What one scan read: the topic, its partitions read, messages, seconds."""

    topic: str
    partitions: int
    messages: int
    seconds: float
    since_ms: int | None  # the time the scan started from (None: from the low watermarks)


class TopicReader:
    """One topic's partition count, watermarks and offsets by time, through a consumer outside any group."""

    def __init__(self, kafka: Kafka, timeout: float) -> None:
        from confluent_kafka import Consumer

        self.kafka = kafka
        self.timeout = timeout
        self.consumer = Consumer(_config(kafka))

    def close(self) -> None:
        self.consumer.close()

    def partitions(self, topic: str) -> int | None:
        """The topic's partition count; None when it does not exist."""
        meta = self.consumer.list_topics(topic, timeout=self.timeout)
        t = meta.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            return None
        return len(t.partitions)

    def require(self, topic: str) -> int:
        count = self.partitions(topic)
        if count is None:
            raise ConfigError(f"topic {topic} does not exist")
        return count

    def spans(self, topic: str, partitions: Iterable[int], since_ms: int | None = None) -> dict[int, Span]:
        """Per partition: from its low watermark (or the first offset at or after `since_ms`) to its
        end offset now; empty spans left out."""
        from confluent_kafka import TopicPartition

        out: dict[int, Span] = {}
        wanted = sorted(set(partitions))
        starts: dict[int, int] = {}
        if since_ms is not None and wanted:
            found = self.consumer.offsets_for_times(
                [TopicPartition(topic, p, max(since_ms, 0)) for p in wanted], self.timeout
            )
            starts = {tp.partition: tp.offset for tp in found}
        for p in wanted:
            low, high = self.consumer.get_watermark_offsets(
                TopicPartition(topic, p), self.timeout, cached=False
            )
            start = low
            if since_ms is not None:
                at = starts.get(p, -1)
                start = high if at < 0 else max(low, at)  # -1: no message at or after the time
            if high > start:
                out[p] = Span(start, high)
        return out


def _config(kafka: Kafka, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    # a group id librdkafka asks for; never joined (assign only) and never committed
    return consumer_config(
        kafka,
        f"olstream-explain-{uuid.uuid4().hex[:8]}",
        {
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            **(extra or {}),
        },
    )


_FAST_FETCH = {
    "fetch.max.bytes": 32 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "queued.max.messages.kbytes": 64 * 1024,
    "fetch.wait.max.ms": 50,
}


def scan(
    kafka: Kafka,
    topic: str,
    spans: Mapping[int, Span],
    collector_of: Callable[[int], Collector],
    *,
    threads: int,
    timeout: float,
    since_ms: int | None = None,
) -> ScanCost:
    """Every message of `spans`, each partition's in order to `collector_of(partition)`; the partitions
    split over up to `threads` consumers. InfrastructureError when a partition does not reach its end."""
    began = time.monotonic()
    work = sorted(spans)
    if not work:
        return ScanCost(topic, 0, 0, 0.0, since_ms)
    collectors = {p: collector_of(p) for p in work}
    shares = [work[i :: max(1, threads)] for i in range(min(max(1, threads), len(work)))]
    counts: list[int] = [0] * len(shares)
    failures: list[BaseException] = []

    def read(i: int) -> None:
        try:
            counts[i] = _read_share(kafka, topic, {p: spans[p] for p in shares[i]}, collectors, timeout)
        except BaseException as e:  # handed to the caller's thread
            failures.append(e)

    if len(shares) == 1:
        read(0)
    else:
        pool = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(len(shares))]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    if failures:
        raise failures[0]
    cost = ScanCost(topic, len(work), sum(counts), time.monotonic() - began, since_ms)
    log.debug(
        "scanned %s: %d partitions, %d messages, %.2f s", topic, cost.partitions, cost.messages, cost.seconds
    )
    return cost


def _read_share(
    kafka: Kafka, topic: str, spans: Mapping[int, Span], collectors: Mapping[int, Collector], timeout: float
) -> int:
    from confluent_kafka import Consumer

    from olstream.shared.topic_read import messages_to_end

    consumer = Consumer(_config(kafka, _FAST_FETCH))
    read = 0
    try:
        deadline = time.monotonic() + max(timeout, 10.0) * 6
        ranges = {p: (s.start, s.end) for p, s in spans.items()}
        for part, _offset, msg in messages_to_end(
            consumer, topic, ranges, batch=BATCH, wait=0.5, deadline=deadline, quiet=timeout
        ):
            read += 1
            collectors[part].offer(msg)
        return read
    finally:
        consumer.close()


def committed_offsets(
    kafka: Kafka, topic: str, groups: Iterable[str] | None, timeout: float
) -> dict[str, dict[int, int]]:
    """group -> partition -> committed offset on `topic`, read with the AdminClient (no group joined,
    nothing changed). `groups` None: every group that committed an offset on `topic`."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

    admin = admin_client(kafka)
    try:
        if groups is None:
            listed = admin.list_consumer_groups(request_timeout=timeout).result()
            names = sorted(g.group_id for g in listed.valid)
        else:
            names = sorted(set(groups))
        out: dict[str, dict[int, int]] = {}
        for name in names:
            request = [ConsumerGroupTopicPartitions(name)]
            for fut in admin.list_consumer_group_offsets(request, request_timeout=timeout).values():
                parts = fut.result().topic_partitions or []
                mine = {tp.partition: tp.offset for tp in parts if tp.topic == topic and tp.offset >= 0}
                if mine or groups is not None:
                    out[name] = mine
        return out
    except KafkaException as e:
        raise InfrastructureError(f"cannot read committed offsets of {topic}: {e}") from e
    finally:
        admin.poll(0)

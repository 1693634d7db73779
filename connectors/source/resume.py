"""Finds where the source connector left off, from what is already in Kafka.

The position lives in Kafka, not in a local file: every message the source
publishes (to the records topic or the errors topic) carries its log partition
and offset in headers, so the last message of a log partition *is* its position.
For each Kafka partition the tail is read backwards in growing windows until
every log partition that hashes to it has been found (or the start is reached).
The connector always scans ``read_committed``: records of aborted transactions (of an
``--exactly-once`` run) never count, and plain records are all visible anyway.

Why both topics: a corrupt row goes to the errors topic, so a log partition
whose last row was corrupt has its position there. The publisher keeps the two
topics ordered per log partition (it waits for acknowledgements around every
error record), so the larger of the two positions never skips a row.
"""

from __future__ import annotations

import logging
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from olstream.contract.wire import HEADER_OFFSET, HEADER_PARTITION, message_key
from olstream.shared.errors import InfrastructureError
from olstream.shared.kafka_admin import not_ready
from olstream.shared.kafka_clients import Kafka, consumer_config

log = logging.getLogger(__name__)

FIRST_WINDOW = 500


def expected_kafka_partition(log_partition: int, kafka_partitions: int) -> int:
    """Where librdkafka's default partitioner (consistent_random: CRC-32 of the key) puts a log partition."""
    return zlib.crc32(message_key(log_partition)) % kafka_partitions


RawHeaders = Sequence[tuple[str, str | bytes | None]] | dict[str, str | bytes | None] | None


def position_of(headers: RawHeaders) -> tuple[int, int] | None:
    """(log partition, offset) named by a message's headers, or None when they are absent."""
    partition = offset = None
    items = headers.items() if isinstance(headers, dict) else headers or ()
    for name, value in items:
        if value is None:
            continue
        if name == HEADER_PARTITION:
            partition = int(value)
        elif name == HEADER_OFFSET:
            offset = int(value)
    if partition is None or offset is None:
        return None
    return partition, offset


def merge_positions(*found: dict[int, int]) -> dict[int, int]:
    """The largest offset per log partition over several topics."""
    out: dict[int, int] = {}
    for positions in found:
        for partition, offset in positions.items():
            if offset > out.get(partition, -1):
                out[partition] = offset
    return out


@dataclass(frozen=True, slots=True)
class ScanResult:
    positions: dict[int, int]
    messages_read: int


class PositionScanner:
    """Reads the tails of the source's topics to find the last published offset per log partition."""

    def __init__(self, kafka: Kafka, *, read_committed: bool, timeout: float = 30.0) -> None:
        self._timeout = timeout
        # Only assign() is used: the group is never joined and nothing is committed.
        self._consumer = Consumer(
            consumer_config(
                kafka,
                f"olstream-source-resume-{uuid.uuid4().hex}",
                {
                    "enable.partition.eof": True,
                    "isolation.level": "read_committed" if read_committed else "read_uncommitted",
                    "fetch.wait.max.ms": 50,
                },
            )
        )

    def close(self) -> None:
        self._consumer.close()

    def scan(self, topic: str, wanted: Iterable[int] | None) -> ScanResult:
        """Positions found in `topic`; `wanted` = log partitions to look for (None: read everything)."""
        meta = self._consumer.list_topics(topic, timeout=self._timeout)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None:
            return ScanResult({}, 0)
        count = len(tmeta.partitions)
        wanted_by_kp: dict[int, set[int]] | None = None
        if wanted is not None:
            wanted_by_kp = {kp: set() for kp in range(count)}
            for p in wanted:
                wanted_by_kp[expected_kafka_partition(p, count)].add(p)
        windows: dict[int, _Window] = {}
        for kp in sorted(tmeta.partitions):
            need = None if wanted_by_kp is None else wanted_by_kp.get(kp, set())
            if need is not None and not need:
                continue
            low, high = self._watermarks(topic, kp)
            if high > low:
                windows[kp] = _Window(low, high, FIRST_WINDOW, need)
        found: dict[int, int] = {}
        read = 0
        while windows:  # read every Kafka partition's window at once, then widen the unfinished ones
            ranges = {kp: (w.start(), w.end) for kp, w in windows.items()}
            for msg in self._read_ranges(topic, ranges):
                read += 1
                pos = position_of(msg.headers())
                if pos is None:
                    continue
                partition, offset = pos
                if wanted_by_kp is not None and expected_kafka_partition(partition, count) != msg.partition():
                    log.warning("topic %s: keys are not where CRC-32 puts them; reading it whole", topic)
                    return self.scan(topic, None)
                if offset > found.get(partition, -1):
                    found[partition] = offset
            for kp, (start, _end) in ranges.items():
                w = windows[kp]
                if start <= w.low or (w.need is not None and w.need.issubset(found)):
                    del windows[kp]
                else:
                    w.end, w.size = start, w.size * 4
        return ScanResult(found, read)

    def _watermarks(self, topic: str, kp: int) -> tuple[int, int]:
        """Low and high watermarks, retried while a new topic's leaders are still being elected."""
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                tp = TopicPartition(topic, kp)
                low, high = self._consumer.get_watermark_offsets(tp, timeout=self._timeout)
                return int(low), int(high)
            except KafkaException as e:
                err = e.args[0]
                if time.monotonic() > deadline or not not_ready(err):
                    raise InfrastructureError(f"cannot read the watermarks of {topic}[{kp}]: {err}") from e
                time.sleep(0.1)

    def _read_ranges(self, topic: str, ranges: dict[int, tuple[int, int]]) -> Iterator[Message]:
        """Messages of several Kafka partitions, each from its start until its end (exclusive) or EOF."""
        self._consumer.assign([TopicPartition(topic, kp, start) for kp, (start, _) in ranges.items()])
        open_ = set(ranges)
        deadline = time.monotonic() + self._timeout
        try:
            while open_:
                batch = self._consumer.consume(num_messages=5000, timeout=0.05)
                if not batch and time.monotonic() > deadline:
                    raise InfrastructureError(f"timed out reading {topic} to find the resume position")
                for msg in batch:
                    kp = msg.partition()
                    if kp not in open_:
                        continue
                    err = msg.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            cause = KafkaException(err)
                            raise InfrastructureError(f"cannot read {topic}[{kp}]: {err}") from cause
                        open_.discard(kp)
                        continue
                    deadline = time.monotonic() + self._timeout
                    offset = msg.offset() or 0
                    end = ranges[kp][1]
                    if offset < end:
                        yield msg
                    if offset >= end - 1:
                        open_.discard(kp)
        finally:
            self._consumer.unassign()


@dataclass(slots=True)
class _Window:
    """The part of one Kafka partition still to read, backwards from its end."""

    low: int
    end: int
    size: int
    need: set[int] | None

    def start(self) -> int:
        return self.low if self.need is None else max(self.low, self.end - self.size)


def read_resume_positions(
    kafka: Kafka,
    topics: Iterable[str],
    wanted: Iterable[int],
    *,
    read_committed: bool,
    timeout: float = 30.0,
) -> dict[int, int]:
    """Log partition -> last offset already in Kafka, over the records topic and the errors topic.

    The first topic is searched only for `wanted` log partitions (those holding rows);
    the others (the errors topic, small by nature) are read whole.
    """
    scanner = PositionScanner(kafka, read_committed=read_committed, timeout=timeout)
    try:
        results = []
        for i, topic in enumerate(topics):
            result = scanner.scan(topic, list(wanted) if i == 0 else None)
            log.info("resume: read %d messages of %s", result.messages_read, topic)
            results.append(result.positions)
        return merge_positions(*results)
    finally:
        scanner.close()

"""Finds where the source connector left off, from what is already in Kafka.

The position lives in Kafka, not in a local file: every message the source
publishes (to the records topic or the errors topic) carries its log partition
and offset in headers, so the last message of a log partition *is* its position.
For each Kafka partition the tail is read backwards in growing windows until
every log partition the topic's placement puts there has been found (or the start
is reached). The placement is read from the offsets topic first (`read_placement`
fixes it when none is recorded yet: see `choose_placement`).
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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from olstream.contract.placement import MAPPING_KEY, Placement, Scheme
from olstream.contract.topics import offsets_topic_of
from olstream.contract.wire import HEADER_OFFSET, HEADER_PARTITION
from olstream.shared.deadletter import REDRIVE_ATTEMPT
from olstream.shared.errors import InfrastructureError, PlacementError
from olstream.shared.kafka_admin import ensure_topic, not_ready
from olstream.shared.kafka_clients import Kafka, consumer_config, producer_config

log = logging.getLogger(__name__)

FIRST_WINDOW = 500


RawHeaders = Sequence[tuple[str, str | bytes | None]] | dict[str, str | bytes | None] | None


def position_of(headers: RawHeaders) -> tuple[int, int] | None:
    """(log partition, offset) named by a message's headers, or None when they are absent, or when
    the message is a copy `olstream errors redrive` sent (`olstream.redrive.attempt`): it carries
    an old row's position at the topic's end, which says nothing of where the source stands."""
    partition = offset = None
    items = headers.items() if isinstance(headers, dict) else headers or ()
    for name, value in items:
        if value is None:
            continue
        if name == REDRIVE_ATTEMPT:
            return None
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
    placement: Placement | None = None  # the last placement record read (offsets topic only)


@dataclass(frozen=True, slots=True)
class TopicShape:
    partitions: int
    written: bool  # any partition's high watermark above 0: something was ever published to it


def choose_placement(recorded: Placement | None, topic: str, shape: TopicShape) -> tuple[Placement, bool]:
    """The records topic's placement, and whether it is new (to be recorded in the offsets topic).

    A recorded placement stands. Without one, a topic that never held a record (created just now by
    the source, or earlier by a worker) gets `modulo` over its partition count; a topic written
    before placements were recorded keeps the key-hash placement the source used then.
    """
    if recorded is not None:
        if shape.partitions < recorded.partitions:
            raise PlacementError(
                f"records topic {topic} has {shape.partitions} partitions, but its placement recorded in "
                f"its offsets topic is {recorded.encode().decode()} (field 'partitions' = "
                f"{recorded.partitions}): was the topic re-created? Re-create its offsets topic with it"
            )
        return recorded, False
    scheme = Scheme.KEY_HASH if shape.written else Scheme.MODULO
    return Placement(scheme, shape.partitions), True


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

    def shape(self, topic: str) -> TopicShape:
        """The topic's partition count and whether anything was ever published to it."""
        meta = self._consumer.list_topics(topic, timeout=self._timeout)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None:
            raise InfrastructureError(f"topic {topic} is not there after creating it")
        written = any(self._watermarks(topic, kp)[1] > 0 for kp in sorted(tmeta.partitions))
        return TopicShape(len(tmeta.partitions), written)

    def scan(
        self, topic: str, wanted: Iterable[int] | None, placement: Placement | None = None
    ) -> ScanResult:
        """Positions found in `topic`; `wanted` = log partitions to look for, where `placement` puts
        them (None: read everything)."""
        meta = self._consumer.list_topics(topic, timeout=self._timeout)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None:
            return ScanResult({}, 0)
        count = len(tmeta.partitions)
        wanted_by_kp: dict[int, set[int]] | None = None
        if wanted is not None and placement is not None:
            wanted_by_kp = {kp: set() for kp in range(count)}
            for p in wanted:
                wanted_by_kp[placement.kafka_partition(p)].add(p)
        windows: dict[int, _Window] = {}
        for kp in sorted(tmeta.partitions):
            need = None if wanted_by_kp is None else wanted_by_kp.get(kp, set())
            if need is not None and not need:
                continue
            low, high = self._watermarks(topic, kp)
            if high > low:
                windows[kp] = _Window(low, high, FIRST_WINDOW, need)
        found: dict[int, int] = {}
        placed: Placement | None = None
        read = 0
        while windows:  # read every Kafka partition's window at once, then widen the unfinished ones
            ranges = {kp: (w.start(), w.end) for kp, w in windows.items()}
            for msg in self._read_ranges(topic, ranges):
                read += 1
                if msg.key() == MAPPING_KEY:
                    try:
                        placed = Placement.decode(msg.value())
                    except PlacementError as e:
                        raise PlacementError(f"{topic}[{msg.partition()}] offset {msg.offset()}: {e}") from e
                    continue
                pos = position_of(msg.headers())
                if pos is None:
                    continue
                partition, offset = pos
                if placement is not None and placement.kafka_partition(partition) != msg.partition():
                    log.warning(
                        "topic %s: log partition %d found in Kafka partition %d, not where its placement "
                        "(%s) puts it; reading the topic whole",
                        topic,
                        partition,
                        msg.partition(),
                        placement.describe(),
                    )
                    return self.scan(topic, None)
                if offset > found.get(partition, -1):
                    found[partition] = offset
            for kp, (start, _end) in ranges.items():
                w = windows[kp]
                if start <= w.low or (w.need is not None and w.need.issubset(found)):
                    del windows[kp]
                else:
                    w.end, w.size = start, w.size * 4
        return ScanResult(found, read, placed)

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


@dataclass(frozen=True, slots=True)
class Resume:
    positions: dict[int, int]  # log partition -> last offset already in Kafka
    placement: Placement  # the records topic's, recorded in the offsets topic


def read_resume_positions(
    kafka: Kafka,
    records_topic: str,
    errors_topic: str,
    offsets_topic: str,
    wanted: Iterable[int],
    *,
    read_committed: bool,
    timeout: float = 30.0,
) -> Resume:
    """The records topic's placement (fixed and recorded now when there is none) and the last offset
    per log partition over the three topics.

    The offsets topic is read first, whole: it holds the placement and the checkpoints. The records
    topic is then searched only for `wanted` log partitions (those holding rows), each where the
    placement puts it; the errors topic (small by nature) is read whole.
    """
    scanner = PositionScanner(kafka, read_committed=read_committed, timeout=timeout)
    try:
        checkpoints = scanner.scan(offsets_topic, None)
        log.info("resume: read %d messages of %s", checkpoints.messages_read, offsets_topic)
        placement = _settle(scanner, kafka, records_topic, offsets_topic, checkpoints.placement, timeout)
        results = [checkpoints.positions]
        for topic, look_for in ((records_topic, list(wanted)), (errors_topic, None)):
            result = scanner.scan(topic, look_for, placement if look_for is not None else None)
            log.info("resume: read %d messages of %s", result.messages_read, topic)
            results.append(result.positions)
        return Resume(merge_positions(*results), placement)
    finally:
        scanner.close()


def placement_of(kafka: Kafka, records_topic: str, *, timeout: float = 30.0) -> Placement:
    """The placement recorded for `records_topic` (an existing topic), fixed and recorded now when
    none is: what any other producer of a records topic places its records by (docs/contract.md)."""
    offsets_topic = offsets_topic_of(records_topic)
    ensure_topic(kafka, offsets_topic, 1, config={"cleanup.policy": "compact"}, timeout=timeout)
    scanner = PositionScanner(kafka, read_committed=True, timeout=timeout)
    try:
        recorded = scanner.scan(offsets_topic, None).placement
        return _settle(scanner, kafka, records_topic, offsets_topic, recorded, timeout)
    finally:
        scanner.close()


def _settle(
    scanner: PositionScanner,
    kafka: Kafka,
    records_topic: str,
    offsets_topic: str,
    recorded: Placement | None,
    timeout: float,
) -> Placement:
    placement, new = choose_placement(recorded, records_topic, scanner.shape(records_topic))
    if new:
        record_placement(kafka, offsets_topic, placement, timeout=timeout)
        written = placement.scheme is Scheme.KEY_HASH
        why = "held records before placements were recorded" if written else "holds no record yet"
        log.info("records topic %s %s: placement %s recorded", records_topic, why, placement.describe())
    else:
        log.info("records topic %s: placement %s", records_topic, placement.describe())
    return placement


def record_placement(kafka: Kafka, offsets_topic: str, placement: Placement, *, timeout: float) -> None:
    """Write the placement's record to the offsets topic (compacted: the last one stands) and wait for it.

    A plain producer of its own: with --exactly-once the source's producer only writes inside
    transactions, and the placement must stand before the first one.
    """
    producer = Producer(producer_config(kafka))
    failed: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failed.append(err)

    producer.produce(offsets_topic, placement.encode(), MAPPING_KEY, on_delivery=delivered)
    if producer.flush(timeout) > 0 or failed:
        reason = failed[0] if failed else f"no acknowledgement within {timeout:g} s"
        raise InfrastructureError(f"cannot record the placement in {offsets_topic}: {reason}")

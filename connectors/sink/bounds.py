"""A replay's range of the lineage topic as offsets: where each partition starts and where it ends.

The range is one of message timestamps (the time each event was produced to the topic, Kafka's
CreateTime), not of the events' `eventTime`. `since` is inclusive, `until` exclusive. Each bound is
turned into offsets with Kafka's offsets-for-times (the first offset whose timestamp is at or after
it); no `until` means the partition's end offset when the replay started.

The resolved range (the two times and each partition's end offset) is stored as the commit
metadata of the replay's group (`encode_metadata`), so a replay that is run again resumes at the
group's committed offsets and ends where the first run would have: a duration such as `2h` is
fixed once, at the first run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaException, TopicPartition

from olstream.shared.errors import ConfigError
from olstream.shared.kafka_admin import retrying

log = logging.getLogger(__name__)

METADATA_VERSION = 1
METADATA_KEY = "olstream.replay"


def format_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class TimeRange:
    """Message timestamps in ms: `since` inclusive, `until` exclusive; None is open."""

    since_ms: int | None = None
    until_ms: int | None = None

    def contains(self, timestamp_ms: int | None) -> bool:
        if self.since_ms is None and self.until_ms is None:
            return True
        if timestamp_ms is None or timestamp_ms < 0:
            return False  # no timestamp: not known to be in a bounded range
        if self.since_ms is not None and timestamp_ms < self.since_ms:
            return False
        return self.until_ms is None or timestamp_ms < self.until_ms

    def describe(self) -> str:
        since = format_ms(self.since_ms) if self.since_ms is not None else "the beginning"
        until = format_ms(self.until_ms) if self.until_ms is not None else "the end at the start"
        return f"[{since}, {until})"


@dataclass(frozen=True, slots=True)
class PartitionRange:
    partition: int
    start: int  # the first offset to deliver (where the group's commit stands, when resumed)
    end: int  # exclusive: the first offset outside the range

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True)
class ReplayBounds:
    topic: str
    times: TimeRange
    partitions: tuple[PartitionRange, ...]
    resumed: bool = False  # taken from the group's commits, not resolved now

    @property
    def remaining(self) -> int:
        """Offsets left to go through (data and, on a transactional topic, markers)."""
        return sum(p.size for p in self.partitions)

    def metadata(self) -> dict[tuple[str, int], str]:
        """Each partition's commit metadata: the range, stored with every commit of the group."""
        return {(self.topic, p.partition): encode_metadata(self.times, p.end) for p in self.partitions}


def encode_metadata(times: TimeRange, end: int) -> str:
    doc = {METADATA_KEY: METADATA_VERSION, "since": times.since_ms, "until": times.until_ms, "end": end}
    return json.dumps(doc, separators=(",", ":"))


def decode_metadata(text: str | None) -> tuple[TimeRange, int] | None:
    """(range, end offset) of a replay's commit metadata; None for anything else."""
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get(METADATA_KEY) != METADATA_VERSION:
        return None
    since, until, end = doc.get("since"), doc.get("until"), doc.get("end")
    if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (since, until)):
        return None
    if not isinstance(end, int) or isinstance(end, bool) or end < 0:
        return None
    return TimeRange(since, until), end


def _checked(found: list[TopicPartition]) -> list[TopicPartition]:
    for tp in found:
        if tp.error is not None:
            raise KafkaException(tp.error)
    return found


def _offsets_at(
    consumer: Consumer, topic: str, partitions: list[int], ms: int, timeout: float
) -> dict[int, int]:
    """partition -> the first offset whose timestamp is at or after `ms` (-1: none, past the end)."""
    asked = [TopicPartition(topic, p, ms) for p in partitions]
    found = retrying(
        lambda: _checked(consumer.offsets_for_times(asked, timeout=min(timeout, 10.0))),
        f"looking up offsets of {topic} at {format_ms(ms)}",
        timeout,
    )
    return {tp.partition: tp.offset for tp in found}


def resolve_offsets(
    consumer: Consumer, topic: str, partitions: list[int], times: TimeRange, timeout: float
) -> tuple[PartitionRange, ...]:
    """Each partition's [start, end) for `times`, read now: offsets-for-times within its watermarks."""
    watermarks = {
        p: retrying(
            lambda p=p: consumer.get_watermark_offsets(  # type: ignore[misc]
                TopicPartition(topic, p), timeout=min(timeout, 10.0), cached=False
            ),
            f"reading the end offsets of {topic}[{p}]",
            timeout,
        )
        for p in partitions
    }
    starts = {p: low for p, (low, _high) in watermarks.items()}
    ends = {p: high for p, (_low, high) in watermarks.items()}
    if times.since_ms is not None:
        for p, offset in _offsets_at(consumer, topic, partitions, times.since_ms, timeout).items():
            starts[p] = ends[p] if offset < 0 else max(offset, watermarks[p][0])
    if times.until_ms is not None:
        for p, offset in _offsets_at(consumer, topic, partitions, times.until_ms, timeout).items():
            if offset >= 0:
                ends[p] = min(ends[p], offset)
    return tuple(PartitionRange(p, starts[p], max(starts[p], ends[p])) for p in partitions)


def plan_bounds(
    consumer: Consumer,
    topic: str,
    partitions: list[int],
    times: TimeRange,
    group: str,
    restart: bool,
    timeout: float,
) -> ReplayBounds:
    """Where the replay goes: on from the group's commits and within their stored range, or (nothing
    committed, or `restart`) the range of `times` resolved now."""
    committed = retrying(
        lambda: consumer.committed(
            [TopicPartition(topic, p) for p in partitions], timeout=min(timeout, 10.0)
        ),
        f"reading the commits of group {group}",
        timeout,
    )
    stored = {tp.partition: (tp.offset, tp.metadata) for tp in committed if tp.offset >= 0}
    if stored and not restart:
        return _resumed(consumer, topic, partitions, stored, group, timeout)
    return ReplayBounds(topic, times, resolve_offsets(consumer, topic, partitions, times, timeout))


def _resumed(
    consumer: Consumer,
    topic: str,
    partitions: list[int],
    stored: Mapping[int, tuple[int, str | None]],
    group: str,
    timeout: float,
) -> ReplayBounds:
    decoded = {p: decode_metadata(metadata) for p, (_offset, metadata) in stored.items()}
    ranges = {d[0] for d in decoded.values() if d is not None}
    if any(d is None for d in decoded.values()) or len(ranges) != 1:
        raise ConfigError(
            f"group {group} has commits on {topic} that are not those of one replay: give another "
            "--group, or --restart to start it over"
        )
    times = ranges.pop()
    fresh = [p for p in partitions if p not in stored]  # partitions added since the first run
    added = {r.partition: r for r in resolve_offsets(consumer, topic, fresh, times, timeout)} if fresh else {}
    out = []
    for p in partitions:
        if p in added:
            out.append(added[p])
            continue
        offset, (_times, end) = stored[p][0], decoded[p]  # type: ignore[misc]
        out.append(PartitionRange(p, offset, max(offset, end)))
    return ReplayBounds(topic, times, tuple(out), resumed=True)

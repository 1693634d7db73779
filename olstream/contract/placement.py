"""Which Kafka partition of the records topic holds a log partition's records: the placement.

Every producer of the records topic places a record by its log partition alone, so one log
partition stays in one Kafka partition, in order (the worker's state and marks depend on it).
A records topic has one placement, fixed once and recorded in the source's offsets topic
(`MAPPING_KEY`), never inferred from the records:

- `modulo` over N0 partitions: log partition p goes to Kafka partition p mod N0. K log partitions
  over N0 Kafka partitions differ by at most one log partition per Kafka partition, and growing
  the topic past N0 later moves nothing. What the source fixes for a topic it creates, or one
  that holds no record yet.
- `key-hash` over N0 partitions: librdkafka's default partitioner (consistent_random: CRC-32 of
  the key, the log partition id in ASCII decimal) over N0 partitions. What the source wrote before
  placements were recorded; a topic written that way keeps it.

The record in the offsets topic: key `MAPPING_KEY`, value ASCII `<scheme>:<N0>` (`modulo:12`).
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass

from olstream.contract.wire import message_key
from olstream.shared.errors import PlacementError

MAPPING_KEY = b"olstream.mapping"
"""The key of the placement's record in the source's offsets topic (no log partition looks like it)."""


class Scheme(enum.Enum):
    MODULO = "modulo"
    KEY_HASH = "key-hash"


@dataclass(frozen=True, slots=True)
class Placement:
    """Log partition -> Kafka partition of the records topic, fixed over `partitions` (N0)."""

    scheme: Scheme
    partitions: int

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise PlacementError(f"a placement needs at least one partition, not {self.partitions}")

    def kafka_partition(self, log_partition: int) -> int:
        if self.scheme is Scheme.MODULO:
            return log_partition % self.partitions
        return zlib.crc32(message_key(log_partition)) % self.partitions

    def encode(self) -> bytes:
        return f"{self.scheme.value}:{self.partitions}".encode("ascii")

    @classmethod
    def decode(cls, value: bytes | None) -> Placement:
        """The placement of a `MAPPING_KEY` record's value (`modulo:12`); PlacementError if it is not one."""
        text = (value or b"").decode("ascii", errors="replace")
        scheme, sep, count = text.partition(":")
        try:
            parsed = Scheme(scheme)
        except ValueError:
            raise PlacementError(
                f"placement record {text!r}: field 'scheme' must be one of "
                f"{', '.join(s.value for s in Scheme)}, not {scheme!r}"
            ) from None
        if not sep or not count.isdigit() or int(count) < 1:
            raise PlacementError(
                f"placement record {text!r}: field 'partitions' must be a positive decimal, not {count!r}"
            )
        return cls(parsed, int(count))

    def describe(self) -> str:
        if self.scheme is Scheme.MODULO:
            return f"log partition p -> Kafka partition p mod {self.partitions}"
        return f"log partition p -> CRC-32 of its key mod {self.partitions} (key-hash)"


def spread(placement: Placement, log_partitions: int) -> list[int]:
    """How many of log partitions 0..log_partitions-1 each Kafka partition 0..N0-1 holds."""
    counts = [0] * placement.partitions
    for p in range(log_partitions):
        counts[placement.kafka_partition(p)] += 1
    return counts

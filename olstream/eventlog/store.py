"""The event-log store interface, shared by the SQLite and PostgreSQL stores.

A log has partitions numbered 0..N-1 (fixed when the log is created); each
partition holds rows with dense, increasing offsets starting at 0. A row is the
record's Avro single-object bytes, stored as written: the store never decodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StoredRow:
    partition: int
    offset: int
    payload: bytes


class FixedPartitions:
    """What both stores share: a partition count fixed when the log was created, and its checks."""

    _partition_count: int

    def partitions(self) -> list[int]:
        return list(range(self._partition_count))

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self._partition_count:
            raise ValueError(f"partition {partition} out of range 0..{self._partition_count - 1}")

    def _check_read(self, partition: int, limit: int) -> None:
        self._check_partition(partition)
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")


class EventLogStore(Protocol):
    url: str

    def partitions(self) -> list[int]:
        """Every partition the log holds, ascending."""

    def read(self, partition: int, after_offset: int, limit: int) -> list[StoredRow]:
        """Up to `limit` rows of `partition` with offset > after_offset, in offset order (-1 reads from 0)."""

    def heads(self) -> dict[int, int]:
        """Partition -> highest offset written (-1 when empty)."""

    def append(self, partition: int, build: Callable[[int], bytes]) -> int:
        """Append one row; `build(offset)` returns its bytes. Returns the offset. Atomic."""

    def append_many(self, items: Sequence[tuple[int, Callable[[int], bytes]]]) -> list[int]:
        """Append several rows in one transaction, in order; returns their offsets."""

    def wait_for_change(self, timeout: float) -> bool:
        """Block up to `timeout` s for a sign that something was appended (True); may wake early."""

    def close(self) -> None: ...

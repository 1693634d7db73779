"""Retention of finished runs: evict them once record time has moved a window past their end.

Pure bookkeeping per *log* partition (a run's records all live in one log partition,
so its record-time clock does not depend on how log partitions map to Kafka
partitions). The agent deletes the returned engine run ids from its table while
processing a record of the same log partition, so the tombstone lands in the
changelog partition that holds the state.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

DEFAULT_RETENTION_MS = 3_600_000


@dataclass
class Retention:
    retention_ms: int = DEFAULT_RETENTION_MS
    max_evictions_per_record: int = 64
    _finished: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    _clock: dict[int, int] = field(default_factory=dict)

    def note_finished(self, log_partition: int, end_ms: int, engine_run_id: str) -> None:
        heapq.heappush(self._finished.setdefault(log_partition, []), (end_ms, engine_run_id))

    def advance(self, log_partition: int, record_ms: int) -> list[str]:
        """Move the partition's record-time clock; the finished runs now past the window."""
        clock = max(self._clock.get(log_partition, 0), record_ms)
        self._clock[log_partition] = clock
        heap = self._finished.get(log_partition)
        out: list[str] = []
        if not heap:
            return out
        horizon = clock - self.retention_ms
        while heap and heap[0][0] < horizon and len(out) < self.max_evictions_per_record:
            out.append(heapq.heappop(heap)[1])
        return out

    def clear(self) -> None:
        self._finished.clear()
        self._clock.clear()

    @property
    def retained(self) -> int:
        return sum(len(h) for h in self._finished.values())

"""Retention of finished runs: evict them once record time has moved a window past their end,
and only once no replay can reach their records again.

Pure bookkeeping per *log* partition (a run's records all live in one log partition,
so its record-time clock does not depend on how log partitions map to Kafka
partitions). The agent deletes the returned state keys (`state.state_key`) from its table while
processing a record of the same log partition, so the tombstone lands in the
changelog partition that holds the state.

Replays start at the input's committed offset, and the changelog may be far ahead of
it (a worker killed before its first commit, a backfill whose record time runs hours
per second). A run evicted while its ``RunStarted`` can still be replayed would start
again: a second START after its terminal event, which Marquez takes as a reopened run.
So a finished run is evicted only when, besides the window, its ``RunEnded`` lies
before the committed position: :class:`CommittedLogPositions` translates the
committed Kafka offsets into "every record of log partition L up to log offset N has
been committed".
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

DEFAULT_RETENTION_MS = 3_600_000


@dataclass
class Retention:
    retention_ms: int = DEFAULT_RETENTION_MS
    max_evictions_per_record: int = 64
    # per log partition: heap of (end_ms, log offset of the RunEnded, state key)
    _finished: dict[int, list[tuple[int, int, str]]] = field(default_factory=dict)
    _clock: dict[int, int] = field(default_factory=dict)

    def note_finished(self, log_partition: int, end_ms: int, end_offset: int, key: str) -> None:
        heapq.heappush(self._finished.setdefault(log_partition, []), (end_ms, end_offset, key))

    def advance(self, log_partition: int, record_ms: int, committed_offset: int) -> list[str]:
        """Move the partition's record-time clock; the finished runs now past the window whose
        ``RunEnded`` is at or before ``committed_offset`` (the last committed log offset)."""
        clock = max(self._clock.get(log_partition, 0), record_ms)
        self._clock[log_partition] = clock
        heap = self._finished.get(log_partition)
        out: list[str] = []
        if not heap:
            return out
        horizon = clock - self.retention_ms
        while (
            heap
            and heap[0][0] < horizon
            and heap[0][1] <= committed_offset
            and len(out) < self.max_evictions_per_record
        ):
            out.append(heapq.heappop(heap)[2])
        return out

    def clear(self) -> None:
        self._finished.clear()
        self._clock.clear()

    @property
    def retained(self) -> int:
        return sum(len(h) for h in self._finished.values())


@dataclass
class CommittedLogPositions:
    """Which log offsets are behind the committed input offsets (so no replay reaches them).

    ``note_acked`` is told, per acked batch and input partition, the batch's last input
    offset and the last log offset of each log partition in it; ``note_committed`` gets the
    committed input offsets (the next offset a restarted consumer reads). Unknown log
    partitions report -1: nothing of them is known to be committed.
    """

    # per input partition: (last input offset of a batch, {log partition: last log offset})
    _pending: dict[int, deque[tuple[int, dict[int, int]]]] = field(default_factory=dict)
    _committed: dict[int, int] = field(default_factory=dict)

    def note_acked(self, input_partition: int, last_input_offset: int, log_offsets: dict[int, int]) -> None:
        self._pending.setdefault(input_partition, deque()).append((last_input_offset, log_offsets))

    def note_committed(self, input_partition: int, next_offset: int) -> None:
        pending = self._pending.get(input_partition)
        while pending and pending[0][0] < next_offset:
            _, log_offsets = pending.popleft()
            for log_partition, offset in log_offsets.items():
                if offset > self._committed.get(log_partition, -1):
                    self._committed[log_partition] = offset

    def committed(self, log_partition: int) -> int:
        return self._committed.get(log_partition, -1)

    def keep_only(self, input_partitions: set[int]) -> None:
        """After a rebalance: forget the acks of input partitions this worker no longer reads."""
        for partition in [p for p in self._pending if p not in input_partitions]:
            del self._pending[partition]

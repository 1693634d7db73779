"""Reads every partition of an event log in offset order, as rows arrive.

The tailer keeps, per log partition, the offset of the last row it handed out,
picks up partitions that appear while it runs, and waits between empty reads
with an adaptive back-off (short right after activity, longer when idle) through
``store.wait_for_change``, which PostgreSQL answers early on LISTEN/NOTIFY.

Offsets are dense, so a row whose offset is not the next one means a gap. A gap
may be a writer's transaction that has not committed yet, so the partition is
held for ``gap_grace`` seconds; if the missing offsets are still absent, the gap
is logged with both ends and the tailer continues after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from olstream.eventlog.store import EventLogStore, StoredRow

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TailerSettings:
    batch_size: int = 2000
    """Rows read per partition per round."""
    min_wait: float = 0.002
    """First wait after an empty read, in seconds; doubles up to max_wait."""
    max_wait: float = 0.05
    """Longest wait between reads of an idle log (bounds the latency of a new row)."""
    gap_grace: float = 1.0
    """How long a missing offset may stay missing before the tailer skips it."""
    refresh_interval: float = 1.0
    """How often the partition list is read again to pick up new partitions."""


@dataclass(frozen=True, slots=True)
class Gap:
    partition: int
    first_missing: int
    last_missing: int


class LogTailer:
    """Hands out the rows of every partition after a start position, in offset order per partition."""

    def __init__(
        self,
        store: EventLogStore,
        start_positions: Mapping[int, int],
        settings: TailerSettings | None = None,
        *,
        on_gap: Callable[[Gap], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._start = dict(start_positions)
        self._settings = settings or TailerSettings()
        self._on_gap = on_gap
        self._clock = clock
        self._positions: dict[int, int] = {}
        self._gap_seen: dict[int, float] = {}
        self._wait = self._settings.min_wait
        self._next_refresh = 0.0
        self.refresh_partitions()

    @property
    def positions(self) -> dict[int, int]:
        """Partition -> offset of the last row handed out (-1: none yet)."""
        return dict(self._positions)

    @property
    def holding_gap(self) -> bool:
        """True while some partition waits to see whether a missing offset shows up."""
        return bool(self._gap_seen)

    def reset(self, positions: Mapping[int, int]) -> None:
        """Go back to these positions (after an aborted transaction): the rows after them come again."""
        for partition in self._positions:
            self._positions[partition] = positions.get(partition, self._start.get(partition, -1))
        self._gap_seen.clear()

    def refresh_partitions(self) -> list[int]:
        """Read the partition list again; returns the partitions that are new."""
        self._next_refresh = self._clock() + self._settings.refresh_interval
        new = [p for p in self._store.partitions() if p not in self._positions]
        for partition in new:
            self._positions[partition] = self._start.get(partition, -1)
        if new and len(new) != len(self._positions):
            log.info("picked up new log partitions %s", new)
        return new

    def read_batch(self) -> list[StoredRow]:
        """The next rows of every partition (up to batch_size each); empty when nothing is new."""
        if self._clock() >= self._next_refresh:
            self.refresh_partitions()
        out: list[StoredRow] = []
        for partition, position in self._positions.items():
            rows = self._store.read(partition, position, self._settings.batch_size)
            if rows:
                out.extend(self._accept(partition, position, rows))
        if out:
            self._wait = self._settings.min_wait
        return out

    def wait(self) -> None:
        """Wait before the next read: returns early when the store signals a change."""
        woke = self._store.wait_for_change(self._wait)
        self._wait = self._settings.min_wait if woke else min(self._wait * 2, self._settings.max_wait)

    def _accept(self, partition: int, position: int, rows: list[StoredRow]) -> list[StoredRow]:
        first = rows[0].offset
        if first != position + 1:
            if not self._gap_is_final(partition):
                return []
            gap = Gap(partition, position + 1, first - 1)
            log.warning(
                "gap in log partition %d: offsets %d..%d are missing; continuing at offset %d",
                partition,
                gap.first_missing,
                gap.last_missing,
                first,
            )
            if self._on_gap is not None:
                self._on_gap(gap)
        self._gap_seen.pop(partition, None)
        # Keep the contiguous prefix; a later discontinuity is looked at on the next read.
        expected = first
        cut = len(rows)
        for i, row in enumerate(rows):
            if row.offset != expected:
                cut = i
                break
            expected += 1
        accepted = rows[:cut]
        self._positions[partition] = accepted[-1].offset
        return accepted

    def _gap_is_final(self, partition: int) -> bool:
        now = self._clock()
        since = self._gap_seen.setdefault(partition, now)
        return now - since >= self._settings.gap_grace

"""The worker's run-state table: each input partition's state transaction for the batch, the
decoded-state cache, the log marks, the retention index and evictions.

A record reads and changes state through its input partition's transaction (`transaction`,
``olstream.streams.partition_state``). The checkpoint takes the batch: `prepare_batch` sends
each owned partition's changes to its changelog partition (run states first, then marks) and
`store_batch` writes them to that partition's store (`RunStore`) once the changelog writes are
durable (acknowledged; under exactly_once, committed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from olstream.streams.log_marks import MarkBook, is_mark_key
from olstream.streams.partition_state import ChangelogSend, PartitionState, StateCache, StoreWrites
from olstream.streams.retention import CommittedLogPositions, Retention
from olstream.streams.runtime.metrics import RETAINED
from olstream.streams.runtime.run_store import RunStore
from olstream.streams.settings import WorkerSettings
from olstream.streams.state_store import finished_end_ms, loads_state

log = logging.getLogger(__name__)

__all__ = ["BatchWrites", "ChangelogSend", "RunTable"]

BatchWrites = list[tuple[PartitionState, StoreWrites]]  # each transaction's store writes, in order


class RunTable:
    """Run states and log marks in the run store, each input partition's batch changes in its
    transaction until stored."""

    def __init__(self, settings: WorkerSettings, store: RunStore, owned: Callable[[], set[Any]]) -> None:
        self.settings = settings
        self.store = store
        self.owned = owned  # the input topic partitions faust's consumer is assigned now
        self.retention = Retention(settings.retention_ms)
        self.committed_log = CommittedLogPositions()
        self.rescan_needed = True
        self.cache = StateCache(settings.state_cache_size)  # cleared on every rebalance
        # per (input partition, log partition): the highest log offset applied (olstream.streams.log_marks)
        self.marks: MarkBook[None] = MarkBook()
        self.open: dict[int, PartitionState] = {}  # the batch's transactions, by input partition

    def assign(self, partitions: list[int]) -> None:
        """A new assignment: open the stores of its partitions, restored from their changelog (blocks:
        run it in an executor)."""
        self.store.assign(partitions)

    def forget_assignment(self) -> None:
        """A revocation: what was read is read again (the caches, marks and retention index are rebuilt
        from the store) once the next assignment's partitions are restored."""
        self.rescan_needed = True

    def transaction(self, partition: int) -> PartitionState:
        """Input partition `partition`'s state transaction of the batch (opened on first use)."""
        tx = self.open.get(partition)
        if tx is None:
            if self.rescan_needed:
                self.rescan()
            tx = self.open[partition] = PartitionState(partition, self.store, self.cache, self.marks)
        return tx

    def prepare_batch(self, send: ChangelogSend) -> BatchWrites:
        """Send each owned partition's changes to the changelog (`PartitionState.prepare`); the store's
        writes, for `store_batch` once the changelog writes are durable.

        The changes of a partition this worker no longer owns are dropped: its new owner processes
        those records again from the committed offset, and a late write here could overwrite the
        newer state the new owner has written to the changelog since.
        """
        owned = set()
        for tp in self.owned():
            owned.add(tp.partition)
        writes: BatchWrites = []
        for partition in sorted(self.open):
            if partition in owned:
                tx = self.open[partition]
                writes.append((tx, tx.prepare(send)))
        self.marks.take_batch()  # a partition's not owned: dropped
        self.open.clear()
        return writes

    def discard_batch(self) -> None:
        """Forget the batch's changes and what was read (a fenced worker's batch: nothing of it was
        committed, and the store is read again after the next assignment)."""
        self.open.clear()
        self.marks.take_batch()
        self.rescan_needed = True  # clears the caches and the marks read from the store

    def store_batch(self, writes: BatchWrites, next_changelog_offsets: dict[int, int]) -> None:
        """Write a prepared batch to the stores, each partition's in one atomic batch with the next
        changelog offset past its writes (so a restart restores only the changelog's tail)."""
        for tx, changes in writes:
            tx.flush(changes, next_changelog_offsets.get(tx.partition))

    # ------------------------------------------------------------------ retention

    def rescan(self) -> None:
        """Rebuild the retention index from the finished runs in the (restored) table."""
        self.cache.clear()  # a rebalance restores partitions from the changelog behind our back
        self.marks.clear()
        self.retention.clear()
        count = 0
        for key, raw in self.store.items(tp.partition for tp in self.owned()):
            if not is_mark_key(key) and finished_end_ms(raw) is not None:
                s = loads_state(raw)
                assert s.end is not None
                log_partition, end = s.start_position[0], s.end
                self.retention.note_finished(log_partition, end.end_ms, end.position[1], s.key)
                count += 1
        self.rescan_needed = False
        self.committed_log.keep_only({tp.partition for tp in self.owned()})
        RETAINED.set(self.retention.retained)
        log.info("retention index rebuilt: %d finished runs retained", count)

"""The worker's run-state table: run states and log marks read through the batch overlay and a
cache, written per batch by the checkpoint; the retention index and evictions.

A batch's changes stay in memory (the overlay, and the marks' batch: `olstream.streams.log_marks`)
until the checkpoint takes them: `prepare_batch` sends them to the changelog, in the partition of
the input partition whose record changed them (its run states first, then its marks), and
`store_batch` writes them to that partition's store (`RunStore`) once the changelog writes are
durable (acknowledged; under exactly_once, committed).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from prometheus_client import Counter

from olstream.streams.log_marks import (
    LogMark,
    MarkBook,
    Verdict,
    dumps_mark,
    is_mark_key,
    loads_mark,
    mark_key,
)
from olstream.streams.retention import CommittedLogPositions, Retention
from olstream.streams.runtime.metrics import EVICTED, RETAINED
from olstream.streams.runtime.run_store import RunStore
from olstream.streams.settings import WorkerSettings
from olstream.streams.state import RunState
from olstream.streams.state_store import dumps_state, finished_end_ms, loads_state

log = logging.getLogger(__name__)

DUPLICATES = Counter(
    "olstream_stream_duplicates_total",
    "Input records at or below their log partition's high-water mark (applied before): skipped",
)
GAPS = Counter(
    "olstream_stream_log_gaps_total",
    "Input records past the next offset of their log partition (the offsets between never arrived)",
)


class ChangelogSends(Protocol):
    """Where the checkpoint sends a batch's state changes (`ChangelogWriter`, or the partition's
    transaction under exactly_once)."""

    def send(self, partition: int, key: bytes, value: bytes | None) -> None: ...


BatchWrites = dict[int, list[tuple[bytes, bytes | None]]]  # input partition -> its store's writes, in order


class RunTable:
    """Run states and log marks in the run store, with the batch's changes in memory until stored."""

    def __init__(self, settings: WorkerSettings, store: RunStore, owned: Callable[[], set[Any]]) -> None:
        self.settings = settings
        self.store = store
        self.owned = owned  # the input topic partitions assigned now
        self.partition = -1  # the input partition of the record being processed: reads go to its store
        self.retention = Retention(settings.retention_ms)
        self.committed_log = CommittedLogPositions()
        self.rescan_needed = True
        # the batch's state changes: state key -> (state, or None when deleted; the event that wrote it)
        self.overlay: dict[str, tuple[RunState | None, Any]] = {}
        # decoded states of the store (bounded LRU), cleared on every rebalance
        self.cache: OrderedDict[str, RunState] = OrderedDict()
        # per (input partition, log partition): the highest log offset applied (olstream.streams.log_marks)
        self.marks: MarkBook[Any] = MarkBook()
        self.duplicates_logged = False

    # ------------------------------------------------------------------ run states

    def lookup(self, key: str) -> RunState | None:
        hit = self.overlay.get(key)
        if hit is not None:
            return hit[0]
        cached = self.cache.get(key)
        if cached is not None:
            self.cache.move_to_end(key)
            return cached
        raw = self.store.get(self.partition, key.encode("utf-8"))
        if raw is None:
            return None
        state = loads_state(raw)
        self.remember(key, state)
        return state

    def remember(self, key: str, state: RunState) -> None:
        """Keep a decoded state (bounded LRU): what is in the store, never anything newer."""
        self.cache[key] = state
        self.cache.move_to_end(key)
        if len(self.cache) > self.settings.state_cache_size:
            self.cache.popitem(last=False)

    def put(self, key: str, state: RunState | None, event: Any) -> None:
        self.overlay[key] = (state, event)

    def prepare_batch(self, changelog: ChangelogSends) -> BatchWrites:
        """Send the batch's state to the changelog (`changelog`): its run states first, then its marks,
        each to the changelog partition of the input partition whose record changed it; the store
        writes, in the same order, for `store_batch` once the changelog writes are durable.

        A stored mark so never covers a record whose state change is not stored (the changelog keeps
        a partition's writes in order, and a store's writes are one atomic batch). A change made by a
        record of a partition this worker no longer owns is dropped: its new owner processes that
        record again from the committed offset, and a late write here could overwrite the newer state
        the new owner has written to the changelog since.
        """
        owned = {tp.partition for tp in self.owned()}
        writes: BatchWrites = {}
        for name, (state, event) in self.overlay.items():
            partition: int = event.message.partition
            if partition not in owned:
                continue
            key = name.encode("utf-8")
            if state is None:
                # a delete of a key the store does not hold writes nothing
                if self.store.get(partition, key) is None:
                    continue
                value = None
            else:
                value = dumps_state(state)
            changelog.send(partition, key, value)
            writes.setdefault(partition, []).append((key, value))
        for input_partition, log_partition, mark, _event in self.marks.take_batch():
            if input_partition not in owned:
                continue
            key = mark_key(input_partition, log_partition).encode("utf-8")
            value = dumps_mark(mark)
            changelog.send(input_partition, key, value)
            writes.setdefault(input_partition, []).append((key, value))
            self.marks.written(input_partition, log_partition, mark)
        for name, (state, event) in self.overlay.items():
            if event.message.partition in owned:
                if state is None:
                    self.cache.pop(name, None)
                else:
                    self.remember(name, state)
        self.overlay.clear()
        return writes

    def discard_batch(self) -> None:
        """Forget the batch's changes and what was read (a fenced worker's batch: nothing of it was
        committed, and the store is read again after the next assignment)."""
        self.overlay.clear()
        self.marks.take_batch()
        self.rescan_needed = True  # clears the caches and the marks read from the store

    def store_batch(self, writes: BatchWrites, next_changelog_offsets: dict[int, int]) -> None:
        """Write a prepared batch to the stores, each partition's in one atomic batch with the next
        changelog offset past its writes (so a restart restores only the changelog's tail)."""
        for partition, changes in writes.items():
            self.store.write(partition, changes, next_changelog_offsets.get(partition))

    # ------------------------------------------------------------------ log marks

    def stored_mark(self, key: str) -> LogMark | None:
        """The mark in the store of the record's input partition (`log_marks.mark_key` names it)."""
        raw = self.store.get(self.partition, key.encode("utf-8"))
        return None if raw is None else loads_mark(raw)

    def judge_mark(self, input_partition: int, log_partition: int, offset: int) -> Verdict:
        """The record's verdict against its log partition's mark; a duplicate (applied before: at or
        below the mark, in no hole) is counted, and the caller skips it; a gap is logged."""
        verdict = self.marks.judge(input_partition, log_partition, offset, self.stored_mark)
        if verdict is Verdict.NEXT:
            return verdict
        mark = self.marks.current(input_partition, log_partition)
        if verdict is Verdict.DUPLICATE:
            DUPLICATES.inc()
            if not self.duplicates_logged:
                self.duplicates_logged = True
                # info: records read again behind the stored state after every restart are duplicates too
                log.info(
                    "input partition %d: the record of log partition %d, offset %d was applied before "
                    "(the partition's mark is at offset %d): skipped, as every such repeat is "
                    "(duplicates_total counts them; logged once per worker)",
                    input_partition,
                    log_partition,
                    offset,
                    mark.high if mark is not None else -1,
                )
        elif verdict is Verdict.GAP:
            assert mark is not None
            GAPS.inc()
            log.warning(
                "input partition %d: log partition %d goes on at offset %d; offsets %d..%d never "
                "arrived (applied as usual; nothing is guessed for the missing ones, which are applied "
                "if they come later)",
                input_partition,
                log_partition,
                offset,
                mark.high + 1,
                offset - 1,
            )
        return verdict

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

    def evict(self, log_partition: int, record_ms: int, event: Any) -> None:
        committed = self.committed_log.committed(log_partition)
        for key in self.retention.advance(log_partition, record_ms, committed):
            s = self.lookup(key)
            if s is not None and s.end is not None:
                self.put(key, None, event)
                EVICTED.inc()

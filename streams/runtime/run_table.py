"""The worker's run-state table: run states and log marks read through the batch overlay and a
cache, written per batch by the checkpoint; the retention index and evictions.

A batch's changes stay in memory (the overlay, and the marks' batch: `olstream.streams.log_marks`)
until its sends were acknowledged; then the run states are written, then the marks, each under
the event that changed it, so the table routes it to that event's partition (RocksDB and changelog).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

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
from olstream.streams.runtime import app as m
from olstream.streams.runtime import faust_private
from olstream.streams.runtime.changelog import ChangelogWriter
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


class RunTable:
    """Run states and log marks in the faust table, with the batch's changes in memory until stored."""

    def __init__(
        self, settings: WorkerSettings, table: Any, changelog: ChangelogWriter, owned: Callable[[], set[Any]]
    ) -> None:
        self.settings = settings
        self.table = table
        self.store: Any = table.data
        self.changelog = changelog
        self.owned = owned  # the input topic partitions assigned now
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
        # the store's raw get: keys and values are raw bytes, and it is one RocksDB read in the
        # current event's partition (Table.get would check membership first, a second read)
        cached = self.cache.get(key)
        if cached is not None:
            self.cache.move_to_end(key)
            return cached
        raw = faust_private.raw_get(self.store, key.encode("utf-8"))
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

    def write_batch(self) -> None:
        """Write the batch's state to the table (RocksDB, and the changelog: `ChangelogWriter`): its
        run states first, then its marks.

        The checkpoint flushes the changelog writer before it commits offsets, so the changelog is never
        behind a committed offset; the writes go to the partition of the event that changed the key, and
        a mark goes to the partition of its log partition's runs after them, so a stored mark never
        covers a record whose state change is not stored (in RocksDB, and in the changelog, which
        keeps a partition's writes in order). A change made by an event of a partition this worker
        no longer owns is dropped: its new owner processes that event again from the committed
        offset, and a late write here could overwrite the newer state the new owner has written to
        the changelog since.
        """
        owned = self.owned()
        routed = -1  # the partition the current event routes the store to
        for name, (state, event) in self.overlay.items():
            if event.message.tp not in owned:
                continue
            routed = self.route(event, routed)
            key = name.encode("utf-8")
            if state is None:
                self.cache.pop(name, None)
                self.write(routed, key, None)
            else:
                self.write(routed, key, dumps_state(state))
                self.remember(name, state)
        for input_partition, log_partition, mark, event in self.marks.take_batch():
            if event.message.tp not in owned:
                continue
            routed = self.route(event, routed)
            key = mark_key(input_partition, log_partition).encode("utf-8")
            self.write(routed, key, dumps_mark(mark))
            self.marks.written(input_partition, log_partition, mark)
        self.overlay.clear()  # only now: the current event is a weak reference to one of its events

    @staticmethod
    def route(event: Any, routed: int) -> int:
        """Make `event` the current event, which routes the store's writes to its partition, unless
        the current one routes there already; the partition."""
        partition: int = event.message.partition
        if partition != routed:
            faust_private.set_current_event(event)
        return partition

    def write(self, partition: int, key: bytes, value: bytes | None) -> bool:
        """Write (or with None delete) `key` in `partition`, the current event's (`route`): its RocksDB
        partition store, and its changelog partition, as faust's own table write does. A delete of a
        key the store does not hold writes nothing (False)."""
        if value is None:
            if faust_private.raw_get(self.store, key) is None:
                return False
            self.changelog.send(partition, key, None)
            del self.store[key]
        else:
            self.changelog.send(partition, key, value)
            self.store[key] = value
        return True

    # ------------------------------------------------------------------ log marks

    def stored_mark(self, key: str) -> LogMark | None:
        """The mark in the store, in the current event's partition (`log_marks.mark_key` names it)."""
        raw = faust_private.raw_get(self.store, key.encode("utf-8"))
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
        for key, raw in self.table.items():
            if raw is not None and not is_mark_key(key) and finished_end_ms(raw) is not None:
                s = loads_state(raw)
                assert s.end is not None
                log_partition, end = s.start_position[0], s.end
                self.retention.note_finished(log_partition, end.end_ms, end.position[1], s.key)
                count += 1
        self.rescan_needed = False
        self.committed_log.keep_only({tp.partition for tp in self.owned()})
        m.RETAINED.set(self.retention.retained)
        log.info("retention index rebuilt: %d finished runs retained", count)

    def evict(self, log_partition: int, record_ms: int, event: Any) -> None:
        committed = self.committed_log.committed(log_partition)
        for key in self.retention.advance(log_partition, record_ms, committed):
            s = self.lookup(key)
            if s is not None and s.end is not None:
                self.put(key, None, event)
                m.EVICTED.inc()

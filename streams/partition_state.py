"""One input partition's state transaction: the run states and log marks a batch reads and changes.

Pure: no faust, no Kafka; the store is handed in (the runtime's `RunStore`).

A record's step reads and writes its input partition's state through this object only (`get`,
`set`, `delete`; `judge` and `applied` for its log partition's mark). The changes stay in memory
until the batch's checkpoint: `prepare` sends them to the changelog partition of this input
partition (the run states first, then the marks, so a stored mark never covers a state change that
is not stored) and returns the store's writes; `flush` writes those to the partition's store in one
atomic batch with the next changelog offset, once the changelog writes are durable.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol

from olstream.streams.log_marks import LogMark, MarkBook, Verdict, dumps_mark, loads_mark, mark_key
from olstream.streams.retention import Retention
from olstream.streams.state import RunState
from olstream.streams.state_store import dumps_state, loads_state

StoreWrites = list[tuple[bytes, bytes | None]]  # a store's writes, in order (None: a delete)


class StateStore(Protocol):
    """The input partitions' stores (`olstream.streams.runtime.run_store.RunStore`)."""

    def get(self, partition: int, key: bytes) -> bytes | None: ...

    def write(
        self, partition: int, writes: Sequence[tuple[bytes, bytes | None]], next_changelog_offset: int | None
    ) -> None: ...


ChangelogSend = Callable[[int, bytes, bytes | None], None]
"""Sends one state change to a changelog partition (partition, key, value; None: a delete):
`ChangelogWriter.send`, or under exactly_once into the worker's transaction."""


class StateCache:
    """Decoded states as the stores hold them (a bounded LRU shared by the partitions' transactions;
    keys name their log partition, so they never meet across input partitions)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.states: OrderedDict[str, RunState] = OrderedDict()

    def get(self, key: str) -> RunState | None:
        state = self.states.get(key)
        if state is not None:
            self.states.move_to_end(key)
        return state

    def put(self, key: str, state: RunState) -> None:
        self.states[key] = state
        self.states.move_to_end(key)
        if len(self.states) > self.size:
            self.states.popitem(last=False)

    def drop(self, key: str) -> None:
        self.states.pop(key, None)

    def clear(self) -> None:
        self.states.clear()


class PartitionState:
    """The batch's state transaction of one input partition (module docstring)."""

    def __init__(self, partition: int, store: StateStore, cache: StateCache, marks: MarkBook[None]) -> None:
        self.partition = partition
        self.store = store
        self.cache = cache
        self.marks = marks  # every partition's marks: this transaction reads and advances its own only
        self.changes: dict[str, RunState | None] = {}  # state key -> its new state, None when deleted

    # ------------------------------------------------------------------ run states

    def get(self, key: str) -> RunState | None:
        if key in self.changes:
            return self.changes[key]
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        raw = self.store.get(self.partition, key.encode("utf-8"))
        if raw is None:
            return None
        state = loads_state(raw)
        self.cache.put(key, state)
        return state

    def set(self, key: str, state: RunState) -> None:
        self.changes[key] = state

    def delete(self, key: str) -> None:
        self.changes[key] = None

    def evict(self, retention: Retention, log_partition: int, record_ms: int, committed_offset: int) -> int:
        """Delete the finished runs of `log_partition` past the retention window whose end is at or
        before `committed_offset` (`Retention.advance`); how many."""
        evicted = 0
        for key in retention.advance(log_partition, record_ms, committed_offset):
            s = self.get(key)
            if s is not None and s.end is not None:
                self.changes[key] = None
                evicted += 1
        return evicted

    # ------------------------------------------------------------------ log marks

    def _stored_mark(self, key: str) -> LogMark | None:
        raw = self.store.get(self.partition, key.encode("utf-8"))
        return None if raw is None else loads_mark(raw)

    def judge(self, log_partition: int, offset: int) -> Verdict:
        """The record's verdict against its log partition's mark (`olstream.streams.log_marks`)."""
        return self.marks.judge(self.partition, log_partition, offset, self._stored_mark)

    def applied(self, log_partition: int, offset: int) -> None:
        """The record had its effect (applied, a replay, or refused): the mark moves past it."""
        self.marks.applied(self.partition, log_partition, offset, None)

    # ------------------------------------------------------------------ the checkpoint

    def prepare(self, send: ChangelogSend) -> StoreWrites:
        """Send the changes to the changelog, run states first, then marks; the store's writes in the
        same order. A delete of a key the store does not hold writes nothing."""
        writes: StoreWrites = []
        for name, state in self.changes.items():
            key = name.encode("utf-8")
            if state is None:
                if self.store.get(self.partition, key) is None:
                    continue
                value = None
            else:
                value = dumps_state(state)
            send(self.partition, key, value)
            writes.append((key, value))
        for log_partition, mark in self.marks.take_partition(self.partition):
            key = mark_key(self.partition, log_partition).encode("utf-8")
            value = dumps_mark(mark)
            send(self.partition, key, value)
            writes.append((key, value))
            self.marks.written(self.partition, log_partition, mark)
        for name, state in self.changes.items():
            if state is None:
                self.cache.drop(name)
            else:
                self.cache.put(name, state)
        self.changes.clear()
        return writes

    def flush(self, writes: StoreWrites, next_changelog_offset: int | None) -> None:
        """Store the prepared writes (durable in the changelog now) with the changelog offset past them."""
        if writes:
            self.store.write(self.partition, writes, next_changelog_offset)

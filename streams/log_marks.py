"""The high-water mark of each log partition: a record applied once is never applied again.

Records can reach the input topic twice at two Kafka offsets: MirrorMaker 2 restarted after a
kill copies a stretch again, a source re-run after its position was lost publishes the log again,
an operator re-publishes a range. A run whose records come again after it finished and was
evicted (`retention`) would start again: a START after its terminal event, which a receiver that
keeps the last event as the run's state (Marquez) shows as a running run forever.

So the worker keeps, per log partition, the highest log offset it has applied (`LogMark.high`),
and the offsets below it that never arrived (`LogMark.holes`: a gap the source skipped, or rows a
writer committed late). A record at or below the mark and in no hole is a duplicate: counted and
skipped before it is decoded. A record above the mark is applied as usual; one past the next
offset leaves a hole (logged; nothing is guessed about what is missing), and a record that fills a
hole later is applied as usual too.

Where the mark lives (`mark_key`): in the run-state table, so in RocksDB and its changelog, in the
partition of the input (Kafka) partition the log partition's records arrive on. The source keys
every record by its log partition, so all records of one log partition arrive on one input
partition, whose state (run states and mark) one worker owns. The key names that input partition
as well, so one key exists in one partition only, even when a log partition's records reach
another input partition (the input topic's partition count raised, a re-publish with another
partitioner): there a mark of its own starts, and neither its mark nor its runs' states are seen
from the first one (as for run states: docs/worker.md). Run keys (`state.state_key`) start with
the log partition's decimal number, so a key starting with `MARK_PREFIX` is never a run's.

When the mark is advanced (`MarkBook`): in the batch, as each record is processed (so a duplicate
later in the same batch is one too); stored only when the batch's state is written, after its run
states, in the same flush. The stored mark therefore never covers a record whose state change is
not stored. A crash before a batch's state is written leaves the mark below that batch's records:
they are processed again, and re-emit the bytes they emitted first; the records before them that a
stored mark covers had their events acknowledged before that mark was stored, and are skipped.

Pure: no faust, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

from olstream.contract import wire
from olstream.shared import deadletter

MARK_PREFIX = "hwm:"
"""The table keys of marks; a run's key starts with a digit or '-' (`state.state_key`)."""
MAX_HOLES = 64
"""Holes kept per mark, the highest ones: an offset of a hole dropped beyond them is a duplicate."""

_PREFIX_BYTES = MARK_PREFIX.encode("ascii")


def mark_key(input_partition: int, log_partition: int) -> str:
    """The table key of the mark of `log_partition` as read from `input_partition`."""
    return f"{MARK_PREFIX}{input_partition}:{log_partition}"


def is_mark_key(key: bytes) -> bool:
    return key.startswith(_PREFIX_BYTES)


def int_value(raw: bytes | None) -> int | None:
    """A header's value as an int; None when absent or not a number."""
    try:
        return None if raw is None else int(raw)
    except ValueError:
        return None


def position_headers(headers: Any) -> tuple[int | None, int | None, bool]:
    """In one pass over a record's headers: its log partition and offset (`wire.HEADER_PARTITION`,
    `wire.HEADER_OFFSET`), and whether it carries `deadletter.REDRIVE_ATTEMPT` (an error record sent
    again). The first value of a name counts, as `wire.header_value` reads it."""
    partition = offset = None
    redriven = False
    for key, value in headers.items() if isinstance(headers, dict) else (headers or ()):
        if not isinstance(value, bytes):
            continue
        if key == wire.HEADER_PARTITION:
            if partition is None:
                partition = value
        elif key == wire.HEADER_OFFSET:
            if offset is None:
                offset = value
        elif key == deadletter.REDRIVE_ATTEMPT:
            redriven = True
    return int_value(partition), int_value(offset), redriven


class Verdict(Enum):
    FIRST = "first"  # no mark yet: applied
    NEXT = "next"  # the offset after the mark: applied
    GAP = "gap"  # past the next offset: applied; the offsets between are a hole
    FILL = "fill"  # below the mark, in a hole: arrived late, applied
    DUPLICATE = "duplicate"  # at or below the mark and in no hole: applied before, skipped


@dataclass(frozen=True, slots=True)
class LogMark:
    high: int  # the highest log offset applied
    holes: tuple[tuple[int, int], ...] = ()  # (first, last) offsets below `high` never seen, ascending


def judge(mark: LogMark | None, offset: int) -> Verdict:
    if mark is None:
        return Verdict.FIRST
    if offset > mark.high:
        return Verdict.NEXT if offset == mark.high + 1 else Verdict.GAP
    for first, last in mark.holes:
        if first <= offset <= last:
            return Verdict.FILL
    return Verdict.DUPLICATE


def advance(mark: LogMark | None, offset: int) -> LogMark:
    """The mark after applying the record at `offset` (not a duplicate: `judge`)."""
    if mark is None:
        return LogMark(offset)
    if offset > mark.high:
        if offset == mark.high + 1:
            return LogMark(offset, mark.holes)
        holes = (*mark.holes, (mark.high + 1, offset - 1))
        return LogMark(offset, holes[-MAX_HOLES:])
    holes_left: list[tuple[int, int]] = []
    for first, last in mark.holes:
        if first <= offset <= last:
            if first < offset:
                holes_left.append((first, offset - 1))
            if offset < last:
                holes_left.append((offset + 1, last))
        else:
            holes_left.append((first, last))
    return LogMark(mark.high, tuple(holes_left))


def dumps_mark(mark: LogMark) -> bytes:
    return json.dumps(
        {"high": mark.high, "holes": [list(h) for h in mark.holes]}, separators=(",", ":")
    ).encode()


def loads_mark(raw: bytes) -> LogMark:
    d = json.loads(raw)
    return LogMark(int(d["high"]), tuple((int(a), int(b)) for a, b in d.get("holes", ())))


Source = TypeVar("Source")
Where = tuple[int, int]  # (input partition, log partition)


@dataclass(slots=True)
class _Pending(Generic[Source]):
    """A batch's mark, advanced in place per record (the hot path: the next offset, no new value)."""

    high: int
    holes: tuple[tuple[int, int], ...]
    source: Source

    def mark(self) -> LogMark:
        return LogMark(self.high, self.holes)


@dataclass
class MarkBook(Generic[Source]):
    """The marks as stored (read once per input and log partition, then remembered) and the batch's
    advances, not stored yet.

    ``Source`` is what a caller keeps with a batch's mark (the worker keeps nothing: None).
    """

    stored: dict[Where, LogMark | None] = field(default_factory=dict)  # None: the table has none
    batch: dict[Where, _Pending[Source]] = field(default_factory=dict)

    def current(self, input_partition: int, log_partition: int) -> LogMark | None:
        """The mark a record is judged against: the batch's, else the stored one (once `judge` read it)."""
        where = (input_partition, log_partition)
        pending = self.batch.get(where)
        return pending.mark() if pending is not None else self.stored.get(where)

    def judge(
        self, input_partition: int, log_partition: int, offset: int, read: Callable[[str], LogMark | None]
    ) -> Verdict:
        """The record's verdict: against the batch's mark, else the stored one (`read` on first use)."""
        where = (input_partition, log_partition)
        pending = self.batch.get(where)
        if pending is not None:
            if offset == pending.high + 1:
                return Verdict.NEXT
            if offset <= pending.high and not pending.holes:
                return Verdict.DUPLICATE
            return judge(pending.mark(), offset)
        if where in self.stored:
            return judge(self.stored[where], offset)
        mark = self.stored[where] = read(mark_key(input_partition, log_partition))
        return judge(mark, offset)

    def applied(self, input_partition: int, log_partition: int, offset: int, source: Source) -> None:
        """The record at `offset` (judged, not a duplicate) was processed: applied, a replay, or
        refused to the errors topic. The batch's mark moves past it."""
        where = (input_partition, log_partition)
        pending = self.batch.get(where)
        if pending is not None and offset == pending.high + 1:
            pending.high, pending.source = offset, source
            return
        current = pending.mark() if pending is not None else self.stored.get(where)
        if judge(current, offset) is Verdict.DUPLICATE:
            return
        mark = advance(current, offset)
        self.batch[where] = _Pending(mark.high, mark.holes, source)

    def take_batch(self) -> list[tuple[int, int, LogMark, Source]]:
        """The batch's marks (input partition, log partition, mark, source), to be written after its
        run states; the batch starts empty again."""
        out = [(where[0], where[1], p.mark(), p.source) for where, p in self.batch.items()]
        self.batch = {}
        return out

    def take_partition(self, input_partition: int) -> list[tuple[int, LogMark]]:
        """The batch's marks of one input partition (log partition, mark), to be written after its run
        states; they leave the batch."""
        out = []
        for where in [w for w in self.batch if w[0] == input_partition]:
            out.append((where[1], self.batch.pop(where).mark()))
        return out

    def written(self, input_partition: int, log_partition: int, mark: LogMark) -> None:
        self.stored[(input_partition, log_partition)] = mark

    def clear(self) -> None:
        """Forget every stored mark (after a rebalance the table may have been restored behind our back)."""
        self.stored.clear()

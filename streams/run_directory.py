"""The run directory: every run start of every log partition, for children on other log partitions.

A child's record may name its parent only by engine run id, or the writer may not know the
parent's job path. The parent can be on any log partition, so on any worker. Every worker reads the
whole records topic beside its own input (``olstream.streams.runtime.directory_reader``) and keeps
here every ``RunStarted`` it reads, as the record's bytes, and how far it has read each log partition.

Decided by the log only. The source puts on every ``RunStarted`` the event log's heads when it read
the run (``wire.HEADER_HEADS``): every run appended before the child is at or below them. A child
is resolved once the directory has read every log partition up to its heads (`covers`), and the
lookup (`DirectoryLookup`) considers only starts at or below those heads. So the answer is the
same on any worker, replica, region or replay, whenever it is asked:

- a parent whose ``RunStarted`` is at or below the heads is found;
- one that is not there is absent (no edge, counted), once the directory has read up to the heads;
- engine run ids are unique per log partition only: a start on the child's own log partition wins
  (the earliest, as the worker refuses a second one there as ``duplicate_start``); else a single
  start on another log partition; two or more there are ambiguous (no edge, counted);
- a start more than `retention_ms` of record time (append times) older than the child is too old
  (no edge, counted);
- a start the worker refuses (it does not decode, an invalid namespace, a START above
  ``--max-event-bytes``) is absent too.

A parent is resolved to its state by the worker's own transition (``state.start``) over the
directory, with the parent's own heads: a child waits while its parent waits (`NotCovered`). A
start without heads (an older source, another producer) says nothing of how far the other log
partitions must be read: it is resolved from its own log partition only, among the starts before it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Protocol

from olstream.contract import codec, wire
from olstream.contract.records import RunStarted
from olstream.shared.errors import DecodeError
from olstream.streams import state as st
from olstream.streams.runid import epoch_millis

DEFAULT_PARENT_RETENTION_MS = 30 * 24 * 3_600_000
"""Record time a parent stays visible to its children by default: 30 days."""
RESOLVED_CACHE_SIZE = 5_000
"""Parents' resolved states kept (resolving again gives the same state: the cache only saves time).
Siblings start close together, so a cache far smaller than the directory already resolves each parent
about once (docs/benchmarks.md "Memory" has the figures)."""

Heads = dict[int, int]


class NotCovered(Exception):
    """The directory has not read every log partition up to `heads` yet: the child waits."""

    def __init__(self, heads: Heads) -> None:
        super().__init__(f"the run directory has not read the log up to {heads}")
        self.heads = heads


class ParentOutcome(Enum):
    FOUND = "found"
    ABSENT = "absent"
    AMBIGUOUS = "ambiguous"
    TOO_OLD = "too_old"


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    """One ``RunStarted`` as the records topic holds it."""

    partition: int
    offset: int
    body: bytes
    heads: bytes | None  # `wire.HEADER_HEADS` as read (decoded when the run is a parent)


@dataclass(frozen=True, slots=True)
class Position:
    """One message of the records topic, as the directory reads it (`RunDirectory.add`)."""

    partition: int
    offset: int
    body: bytes | None = None  # a RunStarted's bytes; None for every other record
    heads: bytes | None = None  # its `wire.HEADER_HEADS`
    engine_run_id: str | None = None  # the RunStarted's (`start_position`); None if it does not decode
    at: tuple[int, int] | None = None  # the message's records-topic partition and offset


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a directory has read: what it needs to go on reading after a restart."""

    read_to: Mapping[int, int]  # records-topic partition -> the next offset to read
    seen: Mapping[int, int]  # log partition -> the highest offset read (`RunDirectory.seen`)
    entries: int  # starts held


def start_position(
    partition: int, offset: int, body: bytes, heads: bytes | None, at: tuple[int, int] | None = None
) -> Position:
    """A RunStarted message as the directory keeps it, with its engine run id.

    Bodies in the current writer schema are not decoded: their engine run id is the fourth field,
    after three varints. Whether the record decodes at all is decided when it is looked up
    (`_decoded`): a start the worker refuses is absent either way.
    """
    rid = _current_engine_run_id(body)
    if rid is None:
        try:
            record = codec.decode(body)
        except DecodeError:
            return Position(partition, offset)  # the worker refuses it, so no child finds it
        if not isinstance(record, RunStarted):
            return Position(partition, offset)
        rid = record.engine_run_id
    return Position(partition, offset, body, heads, rid, at)


@cache
def _run_started_fingerprint() -> bytes:
    return codec.fingerprint_of("RunStarted")


def _current_engine_run_id(body: bytes) -> str | None:
    """The engine run id of a RunStarted in the current writer schema (partition, offset and
    append_time are its first three fields, then engine_run_id); None for anything else."""
    if body[: codec.HEADER_LEN] != codec.MAGIC + _run_started_fingerprint():
        return None
    i = codec.HEADER_LEN
    size = len(body)
    for _ in range(3):  # skip three zigzag varints
        while i < size and body[i] & 0x80:
            i += 1
        i += 1
    shift = length = 0
    while i < size:
        b = body[i]
        i += 1
        length |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    length = (length >> 1) ^ -(length & 1)
    if length < 0 or i + length > size:
        return None
    try:
        return body[i : i + length].decode("utf-8")
    except UnicodeDecodeError:
        return None


Resolver = Callable[[RunStarted, st.Lookup], st.RunState | None]
"""A parent's record + the lookup for its own parents -> its state, or None when the worker refuses it."""


class RunStarts(Protocol):
    """Where the directory keeps the starts: in memory (`MemoryRunStarts`), or on disk
    (``olstream.streams.runtime.disk_run_starts``) so that a worker's memory does not grow with them
    and a restart reads only the records topic's tail."""

    def put(self, engine_run_id: str, entry: DirectoryEntry, at: tuple[int, int] | None = None) -> bool:
        """Keep `entry` (at records-topic partition and offset `at`); False when a start at its
        position was kept before (a re-read)."""
        ...

    def get(self, engine_run_id: str) -> list[DirectoryEntry]:
        """Every start kept for `engine_run_id`, in no particular order."""
        ...

    def keep(self, progress: Progress) -> None:
        """Keep how far the directory has read, after the starts it covers."""
        ...

    def evict_below(self, lows: Mapping[int, int]) -> int:
        """Forget the starts below these records-topic offsets; how many were forgotten."""
        ...


class MemoryRunStarts:
    """The starts in a dict (tests, benches)."""

    def __init__(self) -> None:
        self._starts: dict[str, DirectoryEntry | list[DirectoryEntry]] = {}

    def put(self, engine_run_id: str, entry: DirectoryEntry, at: tuple[int, int] | None = None) -> bool:
        starts = self._starts
        known = starts.get(engine_run_id)
        if known is None:
            starts[engine_run_id] = entry
            return True
        entries = known if isinstance(known, list) else [known]
        if any((e.partition, e.offset) == (entry.partition, entry.offset) for e in entries):
            return False
        starts[engine_run_id] = [*entries, entry]
        return True

    def get(self, engine_run_id: str) -> list[DirectoryEntry]:
        known = self._starts.get(engine_run_id)
        if known is None:
            return []
        return list(known) if isinstance(known, list) else [known]

    def keep(self, progress: Progress) -> None:
        """Nothing outlives the process."""

    def evict_below(self, lows: Mapping[int, int]) -> int:
        """Nothing is evicted: the starts live as long as the process (tests, benches)."""
        return 0


class RunDirectory:
    """Every run start read so far, by engine run id, and how far each log partition was read."""

    def __init__(
        self,
        retention_ms: int = DEFAULT_PARENT_RETENTION_MS,
        starts: RunStarts | None = None,
        kept: Progress | None = None,
    ) -> None:
        """`kept`: what `starts` held already (a directory kept across a restart)."""
        self.retention_ms = retention_ms
        self.seen: dict[int, int] = {} if kept is None else dict(kept.seen)  # log partition -> offset
        self.read_to: dict[int, int] = {} if kept is None else dict(kept.read_to)
        self._starts: RunStarts = MemoryRunStarts() if starts is None else starts
        self._resolved: OrderedDict[tuple[int, int], st.RunState | None] = OrderedDict()
        self.entries = 0 if kept is None else kept.entries

    def add(self, positions: Iterable[Position], read_to: Mapping[int, int] | None = None) -> None:
        """Register what was read, in the records topic's order (per log partition: the log's order),
        and then, when given, how far each records-topic partition was read (the next offsets)."""
        seen = self.seen
        put = self._starts.put
        for pos in positions:
            if pos.offset > seen.get(pos.partition, -1):
                seen[pos.partition] = pos.offset
            rid = pos.engine_run_id
            if pos.body is None or rid is None:
                continue
            if put(rid, DirectoryEntry(pos.partition, pos.offset, pos.body, pos.heads), pos.at):
                self.entries += 1
        if read_to:
            self.read_to.update(read_to)
            self._starts.keep(Progress(dict(self.read_to), dict(seen), self.entries))

    def evict_below(self, lows: Mapping[int, int]) -> int:
        """Forget the starts at records-topic offsets below `lows` (thread-safe: no count changes;
        `forget` counts them, on the event loop)."""
        return self._starts.evict_below(lows)

    def forget(self, count: int) -> None:
        """`count` starts were evicted (`evict_below`)."""
        self.entries -= count

    def covers(self, heads: Heads) -> bool:
        """True once every log partition has been read up to its head in `heads`."""
        seen = self.seen
        return all(seen.get(p, -1) >= h for p, h in heads.items())

    def starts_of(self, engine_run_id: str) -> list[DirectoryEntry]:
        return self._starts.get(engine_run_id)

    def choose(
        self, engine_run_id: str, partition: int, offset: int, heads: Heads | None, child_ms: int
    ) -> tuple[ParentOutcome, RunStarted | None, DirectoryEntry | None]:
        """The start a child at (partition, offset) with these heads finds for `engine_run_id`.

        Its own log partition counts before the child; other log partitions up to the child's heads
        (none without heads). The earliest start of a log partition is the run (the worker refuses a
        later one as ``duplicate_start``).
        """
        own: list[tuple[DirectoryEntry, RunStarted]] = []
        other: dict[int, tuple[DirectoryEntry, RunStarted]] = {}  # per log partition: its earliest
        too_old = False
        for entry in self.starts_of(engine_run_id):
            if entry.partition == partition:
                if entry.offset >= offset:
                    continue  # the child itself, or appended after it
            elif heads is None or entry.offset > heads.get(entry.partition, -1):
                continue  # not in the log when the source read the child, or no heads: own partition only
            record = _decoded(entry)
            if record is None:
                continue
            if child_ms - epoch_millis(record.append_time) > self.retention_ms:
                too_old = True
                continue
            if entry.partition == partition:
                own.append((entry, record))
            else:
                known = other.get(entry.partition)
                if known is None or entry.offset < known[0].offset:
                    other[entry.partition] = (entry, record)
        if own:
            entry, record = min(own, key=lambda er: er[0].offset)
            return ParentOutcome.FOUND, record, entry
        if len(other) == 1:
            ((entry, record),) = other.values()
            return ParentOutcome.FOUND, record, entry
        if other:
            return ParentOutcome.AMBIGUOUS, None, None
        return (ParentOutcome.TOO_OLD if too_old else ParentOutcome.ABSENT), None, None

    def resolved(self, entry: DirectoryEntry) -> tuple[bool, st.RunState | None]:
        key = (entry.partition, entry.offset)
        cache = self._resolved
        if key in cache:
            cache.move_to_end(key)
            return True, cache[key]
        return False, None

    def remember(self, entry: DirectoryEntry, state: st.RunState | None) -> None:
        cache = self._resolved
        cache[(entry.partition, entry.offset)] = state
        if len(cache) > RESOLVED_CACHE_SIZE:
            cache.popitem(last=False)


class DirectoryLookup:
    """A child's `state.Lookup` for its parent and root: engine run id -> the run's state, from the
    directory, as of the child's heads. Raises `NotCovered` while the directory is behind them.

    `outcomes` keeps what each looked-up id gave (for the metrics of the child's own parent). An
    answer, once the directory covers the heads, is final (every start it considers is at or below
    them, and the rules are functions of the log): it is kept, so the agent's dry run before the wait
    (`ParentWait.pending`) and the record's application ask the directory once.
    """

    def __init__(
        self,
        directory: RunDirectory,
        resolve: Resolver,
        partition: int,
        offset: int,
        heads: Heads | None,
        child_ms: int,
    ) -> None:
        self.directory = directory
        self.resolve = resolve
        self.partition = partition
        self.offset = offset
        self.heads = heads
        self.child_ms = child_ms
        self.outcomes: dict[str, ParentOutcome] = {}
        self.answers: dict[str, st.RunState | None] = {}

    def __call__(self, engine_run_id: str) -> st.RunState | None:
        if engine_run_id in self.answers:
            return self.answers[engine_run_id]
        state = self.ask(engine_run_id)
        self.answers[engine_run_id] = state
        return state

    def ask(self, engine_run_id: str) -> st.RunState | None:
        d = self.directory
        if self.heads is not None and not d.covers(self.heads):
            raise NotCovered(self.heads)
        outcome, record, entry = d.choose(
            engine_run_id, self.partition, self.offset, self.heads, self.child_ms
        )
        if record is None or entry is None:
            self.outcomes[engine_run_id] = outcome
            return None
        known, state = d.resolved(entry)
        if not known:
            heads = None if entry.heads is None else wire.decode_heads(entry.heads)
            inner = DirectoryLookup(
                d, self.resolve, entry.partition, entry.offset, heads, epoch_millis(record.append_time)
            )
            state = self.resolve(record, inner)  # NotCovered propagates: the child waits for it too
            d.remember(entry, state)
        self.outcomes[engine_run_id] = ParentOutcome.FOUND if state is not None else ParentOutcome.ABSENT
        return state


def _decoded(entry: DirectoryEntry) -> RunStarted | None:
    try:
        record = codec.decode(entry.body, entry.partition, entry.offset)
    except DecodeError:
        return None  # the worker refuses it (undecodable, invalid_time): absent
    if not isinstance(record, RunStarted) or (record.partition, record.offset) != (
        entry.partition,
        entry.offset,
    ):
        return None
    return record

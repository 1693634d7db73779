"""Which input records the agent takes, and which offsets may be committed: the worker's, not faust's.

faust-streaming marks offsets safe to commit from its fetch bookkeeping as well as from
acks: an offset it believes it skipped (a "gap" between two fetched offsets) counts as
acked, and a record below its read offset is dropped as already read. Around rebalances
that bookkeeping goes stale (a read offset written back after its partition was revoked, a
fetch position left where an earlier owner's fetch ended), and faust then dropped records
and committed past them: a kill -9 during scale-out lost whole runs. So, per assigned input
partition, the worker keeps its own ledger:

- the agent takes records strictly in offset order from the position faust sought to.
  A record above the next expected offset is a hole: only the broker can say whether it
  holds records (faust dropped them: the partition is read again from the hole) or none
  (transaction markers of ``olstream source --exactly-once``: passed);
- a commit covers only offsets the agent acked (processed, events acknowledged, state
  written) or the broker showed empty.

A ledger starts at the group's committed offset whenever faust seeks the partition. Pure:
no faust, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Admission(Enum):
    PROCESS = "process"  # the next record in offset order
    SKIP = "skip"  # already taken, or waiting for the partition to be read again from a hole
    HOLE = "hole"  # above the next expected offset: ask the broker what lies between


@dataclass(slots=True)
class InputLedger:
    """The commit position and the read position of one input partition."""

    base: int  # every offset below is acked or absent: the offset to commit next
    next_offset: int = -1  # the offset the agent takes next (-1: the base)
    acked: set[int] = field(default_factory=set)
    absent_until: dict[int, int] = field(default_factory=dict)  # start -> end (exclusive), no records
    reread_since: float | None = None  # monotonic time a read from `next_offset` was requested
    seen_at: float = 0.0  # monotonic time a record of the partition last reached the agent (or it started)

    def __post_init__(self) -> None:
        if self.next_offset < self.base:
            self.next_offset = self.base

    # ------------------------------------------------------------------ reading

    def admit(self, offset: int) -> Admission:
        """What to do with the record at `offset`; PROCESS moves the read position past it."""
        if offset == self.next_offset:
            self.next_offset += 1
            self.reread_since = None
            return Admission.PROCESS
        if offset < self.next_offset or self.reread_since is not None:
            return Admission.SKIP
        return Admission.HOLE

    def pass_absent(self, end: int) -> None:
        """The broker has no record from the read position up to `end` (exclusive)."""
        if end > self.next_offset:
            self.note_absent(self.next_offset, end)
            self.next_offset = end

    def request_reread(self, now: float) -> int:
        """Records from the read position were dropped before the agent: read them again from there."""
        self.reread_since = now
        return self.next_offset

    # ------------------------------------------------------------------ committing

    def note_acked(self, offset: int) -> None:
        if offset >= self.base:
            self.acked.add(offset)

    def note_absent(self, start: int, end: int) -> None:
        if end > start and end > self.base:
            self.absent_until[start] = max(end, self.absent_until.get(start, end))

    def advance(self) -> int:
        """Move `base` over acked and absent offsets; the offset that may be committed."""
        acked, absent = self.acked, self.absent_until
        while True:
            if self.base in acked:
                acked.discard(self.base)
                self.base += 1
            elif self.base in absent:
                self.base = absent.pop(self.base)
            else:
                break
        if absent:
            for start in [s for s, e in absent.items() if e <= self.base]:
                del absent[start]
        return self.base

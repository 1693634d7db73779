"""Which input records the worker takes, which it reads again, and which offsets it commits: pure.

faust-streaming reads the input topic for the worker, and its stream drops records it fetched
around a rebalance (an older consumer generation, or taken while the flow was suspended). The
worker commits the input itself (the topic is declared with ``acks=False``), so it has to know
which records it processed. Per assigned input partition an :class:`InputLedger` keeps the read
position (the offset the agent takes next) and the commit position (every offset below is
processed or shown empty by the broker); :class:`InputTracker` is the state machine over all of
them. It does no I/O and knows no faust: the runtime (``olstream.streams.runtime.input_order``)
feeds it facts and carries out its decisions.

Facts: a partition was assigned at a committed offset, the assignment was revoked, record N
arrived, a checkpoint started and ended, the broker's end offset of a partition, the first record
the broker has at or after an offset (``None``: it did not answer).

Decisions:

- a record is PROCESSed only as the next one of its partition; one below is SKIPped (taken
  already, or a partition being read again); one above is a HOLE: a :class:`Probe` asks the broker
  what lies between. Records there: faust dropped them, and the partition is read again from the
  first (:class:`ReadAgain`). None: transaction markers of ``olstream source --exactly-once``,
  passed, and the record is processed.
- a partition whose last records were dropped has no later record to reveal the hole: a partition
  quiet for ``tail_quiet`` seconds, with no checkpoint under way (or a slow one just ended) and no
  rebalance, is a tail candidate; its end offset is asked, then a probe from the read position; a
  tail of markers only is passed, any record is read again.
- a read again that brought nothing within ``reread_after`` seconds is asked for again.
- every answer carries the :class:`Ticket` it was asked under; an answer for a partition that
  changed meanwhile (a record arrived, it was read again, revoked or assigned anew, a checkpoint
  began) is dropped. That one rule replaces re-checking guards after every await.
- a commit covers the processed prefix only, and never goes backwards (asserted).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

REREAD_SECONDS = 10.0  # a partition read again is sought again if nothing came by then
TAIL_QUIET_SECONDS = 5.0  # quiet this long behind its end: its tail is looked into
SLOW_CHECKPOINT_SECONDS = 1.0  # a checkpoint whose sends waited this long held the agent's queue back


class Admission(Enum):
    PROCESS = "process"  # the next record in offset order
    SKIP = "skip"  # taken already, no ledger, or the partition is being read again
    HOLE = "hole"  # above the read position: probe the broker (InputTracker.probe_hole)


@dataclass(frozen=True, slots=True)
class Ticket:
    """The state of one partition a question to the broker was asked in."""

    partition: int
    ledger: int  # the ledger's identity (a new one per assignment)
    version: int  # bumped by every change of the partition's read position or reread state
    offset: int  # the read position when asked
    checkpoints: int  # checkpoints begun by then (a tail's answer is dropped when one began since)


@dataclass(frozen=True, slots=True)
class Probe:
    """Ask the broker for the first record of `ticket.partition` at or after `ticket.offset`."""

    ticket: Ticket


@dataclass(frozen=True, slots=True)
class ReadAgain:
    """Seek the partition to `offset`: records from there were fetched but never reached the agent."""

    partition: int
    offset: int
    found_by: str


@dataclass(slots=True)
class InputLedger:
    """The commit position and the read position of one input partition."""

    partition: int
    identity: int
    base: int  # every offset below is processed or absent: the offset to commit next
    next_offset: int  # the offset the agent takes next
    seen_at: float  # monotonic time a record last arrived (or the assignment)
    version: int = 0
    done_through: int = -1  # the highest offset a checkpoint stored
    absent: dict[int, int] | None = None  # start -> end (exclusive): no records there
    reread_since: float | None = None  # monotonic time a read from `next_offset` was asked for

    def pass_absent(self, end: int) -> None:
        """The broker has no record from the read position up to `end` (exclusive)."""
        if end > self.next_offset:
            if self.absent is None:
                self.absent = {}
            self.absent[self.next_offset] = end
            self.next_offset = end
            self.version += 1

    def advance(self) -> int:
        """Move `base` over stored and absent offsets; the offset that may be committed."""
        base = max(self.base, self.done_through + 1)
        absent = self.absent
        moved = True
        while absent and moved:
            moved = False
            for start, end in list(absent.items()):
                if start <= base:
                    del absent[start]
                    if end > base:
                        base, moved = end, True
        self.base = base
        return base


class InputTracker:
    """The input ledgers of one worker, and what it decides from the facts the runtime gives it."""

    def __init__(
        self,
        tail_quiet: float = TAIL_QUIET_SECONDS,
        reread_after: float = REREAD_SECONDS,
        slow_checkpoint: float = SLOW_CHECKPOINT_SECONDS,
    ) -> None:
        self.tail_quiet = tail_quiet
        self.reread_after = reread_after
        self.slow_checkpoint = slow_checkpoint
        self.ledgers: dict[int, InputLedger] = {}
        # partition -> the offset last committed (or assigned at); None: the group never committed it
        self.committed: dict[int, int | None] = {}
        self.rebalancing = False
        self.stopping = False
        self.checkpointing = False
        self.held_until = 0.0  # a slow checkpoint or a child's wait held the agent's queue back until then
        self.waiting = False  # the agent waits for a child's parents: records queue behind it
        self.checkpoints = 0  # checkpoints begun
        self._identities = 0

    # ------------------------------------------------------------------ assignment

    def revoked(self) -> None:
        """A rebalance started: every ledger goes (faust's eager rebalance revokes every partition)."""
        self.rebalancing = True
        self.ledgers.clear()
        self.committed.clear()

    def assigned(self, bases: dict[int, int], now: float, never_committed: set[int] | None = None) -> None:
        """The partitions assigned, each at the group's committed offset (its earliest when none: the
        first checkpoint commits it there, so the group has a position for every partition)."""
        self.rebalancing = False
        self.ledgers.clear()
        self.committed.clear()
        for partition, base in bases.items():
            self._identities += 1
            self.ledgers[partition] = InputLedger(partition, self._identities, base, base, now)
            self.committed[partition] = None if partition in (never_committed or ()) else base

    # ------------------------------------------------------------------ records

    def arrived(self, partition: int, offset: int, now: float) -> Admission:
        """A record reached the agent: what to do with it. PROCESS moves the read position past it."""
        ledger = self.ledgers.get(partition)
        if ledger is None or self.stopping:  # stopping: what it takes now would never be committed
            return Admission.SKIP
        ledger.seen_at = now
        if offset == ledger.next_offset:
            ledger.next_offset += 1
            ledger.reread_since = None
            ledger.version += 1
            return Admission.PROCESS
        if offset < ledger.next_offset or ledger.reread_since is not None:
            return Admission.SKIP
        return Admission.HOLE

    def probe_hole(self, partition: int) -> Probe:
        """The question to ask about a HOLE of `partition` (the record that found it is held)."""
        return Probe(self._ticket(self.ledgers[partition]))

    def hole_probed(
        self, ticket: Ticket, offset: int, first: int | None, now: float
    ) -> Admission | ReadAgain:
        """The broker's answer about the hole the record at `offset` found: PROCESS that record (only
        markers lay between), SKIP it (the partition changed meanwhile), or read again from the first
        record in between (or from the read position, when the broker did not answer)."""
        ledger = self._current(ticket)
        if ledger is None:
            return Admission.SKIP
        if first is not None and first >= offset:
            ledger.pass_absent(offset)
            return self.arrived(ticket.partition, offset, now)
        if first is not None:
            ledger.pass_absent(first)
        return self._read_again(ledger, ticket.partition, now, f"offset {offset} arrived first")

    def identity(self, partition: int) -> int | None:
        ledger = self.ledgers.get(partition)
        return None if ledger is None else ledger.identity

    def owns(self, partition: int, identity: int) -> bool:
        """Whether the ledger a record was admitted by is still the partition's (no rebalance since)."""
        ledger = self.ledgers.get(partition)
        return ledger is not None and ledger.identity == identity

    # ------------------------------------------------------------------ tails and rereads

    def holds_input_back(self, now: float) -> bool:
        """Records of a quiet partition may still be queued for the agent: no tail is looked into."""
        held = self.stopping or self.rebalancing or self.checkpointing or self.waiting
        return held or now < self.held_until

    def wait_started(self) -> None:
        """The agent waits for a child's parents (the run directory): no partition is quiet meanwhile."""
        self.waiting = True

    def wait_ended(self, now: float) -> None:
        """The queue behind the waiting child drains: its partitions are quiet only a stretch later."""
        self.waiting = False
        self.held_until = max(self.held_until, now + self.tail_quiet)

    def quiet_partitions(self, now: float) -> list[Ticket]:
        """Partitions with no record for `tail_quiet` seconds and no reread under way: ask their end
        offsets. Each is asked again only after another quiet stretch."""
        if self.holds_input_back(now):
            return []
        tickets = []
        for ledger in self.ledgers.values():
            if ledger.reread_since is None and now - ledger.seen_at >= self.tail_quiet:
                ledger.seen_at = now
                tickets.append(self._ticket(ledger))
        return tickets

    def tail_end(self, ticket: Ticket, end: int, now: float) -> Probe | None:
        """The end offset of a quiet partition: a probe from its read position when it is behind."""
        ledger = self._current(ticket, tail=True)
        if ledger is None or self.holds_input_back(now) or ledger.next_offset >= end:
            return None
        return Probe(ticket)

    def tail_probed(self, ticket: Ticket, end: int, first: int | None, now: float) -> ReadAgain | None:
        """The first record at or after the read position of a quiet partition behind its end: a tail
        of markers only is passed; a record means the tail was dropped: read again from it."""
        ledger = self._current(ticket, tail=True)
        if ledger is None or first is None or self.holds_input_back(now):
            return None
        if first >= end:
            ledger.pass_absent(end)
            return None
        ledger.pass_absent(first)
        return self._read_again(
            ledger, ticket.partition, now, f"none for {self.tail_quiet:.0f} s, end offset {end}"
        )

    def rereads_due(self, now: float) -> list[ReadAgain]:
        """Reads again that brought nothing within `reread_after` seconds: seek again."""
        due = []
        for partition, ledger in self.ledgers.items():
            if ledger.reread_since is not None and now - ledger.reread_since >= self.reread_after:
                ledger.reread_since = now
                ledger.version += 1
                due.append(ReadAgain(partition, ledger.next_offset, f"none for {self.reread_after:.0f} s"))
        return due

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_started(self) -> None:
        self.checkpointing = True
        self.checkpoints += 1  # a tail's answer asked before describes a queue the checkpoint held back

    def checkpoint_ended(self, now: float, waited: float) -> None:
        self.checkpointing = False
        if waited >= self.slow_checkpoint:
            self.held_until = now + self.tail_quiet

    def stored(self, partition: int, through: int) -> None:
        """A checkpoint stored the records of `partition` up to `through`: committable up to there."""
        ledger = self.ledgers.get(partition)
        if ledger is not None and through > ledger.done_through:
            ledger.done_through = through

    def committable(self) -> dict[int, int]:
        """The offsets to commit: each partition's processed prefix, where it moved."""
        out = {}
        for partition, ledger in self.ledgers.items():
            offset = ledger.advance()
            last = self.committed[partition]
            assert last is None or offset >= last, (
                f"input partition {partition}: commit {offset} behind {last}"
            )
            if last is None or offset > last:
                out[partition] = offset
        return out

    def partitions(self) -> list[int]:
        """The partitions of the current assignment's ledgers."""
        return sorted(self.ledgers)

    def transaction_offsets(self) -> tuple[dict[int, int], dict[int, int]]:
        """The offsets a transaction commits (exactly_once): where each partition's processed prefix
        moved (`committable`), and beside them every other owned partition's committed one again, so
        that every transaction's offsets carry the group's generation check (the second mapping: all)."""
        moved = self.committable()
        every = {p: o for p in self.ledgers if (o := self.recommit_offset(p)) is not None}
        every.update(moved)
        return moved, every

    def recommit_offset(self, partition: int) -> int | None:
        """The offset a commit of `partition` may carry without moving it: the group's committed one
        (its earliest when never committed, where the first checkpoint commits it); None: not owned."""
        ledger = self.ledgers.get(partition)
        if ledger is None:
            return None
        last = self.committed[partition]
        return ledger.base if last is None else last

    def did_commit(self, offsets: dict[int, int]) -> None:
        for partition, offset in offsets.items():
            if partition in self.committed:
                last = self.committed[partition]
                assert last is None or offset >= last, (
                    f"input partition {partition}: commit {offset} behind {last}"
                )
                self.committed[partition] = offset

    # ------------------------------------------------------------------ --until-idle and diagnosis

    def taken_to(self, partition: int) -> int | None:
        """The offset up to which this worker processed and stored the partition (None: not assigned)."""
        ledger = self.ledgers.get(partition)
        return None if ledger is None else ledger.advance()

    def settled_ticket(self, partition: int) -> Ticket | None:
        """A ticket for the partition's tail when every record it took is stored (None otherwise)."""
        ledger = self.ledgers.get(partition)
        if ledger is None or ledger.advance() != ledger.next_offset:
            return None
        return self._ticket(ledger)

    def describe(self, now: float) -> str:
        lines = []
        for partition, ledger in sorted(self.ledgers.items()):
            again = "no" if ledger.reread_since is None else f"since {now - ledger.reread_since:.1f} s"
            lines.append(
                f"input partition {partition}: read position {ledger.next_offset}, commit base "
                f"{ledger.base}, committed {self.committed.get(partition)}, last record "
                f"{now - ledger.seen_at:.1f} s ago, read again: {again}"
            )
        return "\n".join(lines) or "no input partition assigned"

    # ------------------------------------------------------------------ internals

    def _ticket(self, ledger: InputLedger) -> Ticket:
        return Ticket(ledger.partition, ledger.identity, ledger.version, ledger.next_offset, self.checkpoints)

    def _current(self, ticket: Ticket, tail: bool = False) -> InputLedger | None:
        """The ticket's ledger, if the partition did not change since the ticket was given (for a
        tail's question: and no checkpoint began since)."""
        ledger = self.ledgers.get(ticket.partition)
        if ledger is None or ledger.identity != ticket.ledger or ledger.version != ticket.version:
            return None
        if tail and ticket.checkpoints != self.checkpoints:
            return None
        return ledger

    def _read_again(self, ledger: InputLedger, partition: int, now: float, found_by: str) -> ReadAgain:
        ledger.reread_since = now
        ledger.version += 1
        return ReadAgain(partition, ledger.next_offset, found_by)

"""The worker's input order: the runtime side of ``olstream.streams.input_tracker``, and its one owner.

`InputOrder` alone holds the tracker; the steps and the worker ask it. It gives the tracker its
facts (a record arrived, the partitions assigned at the group's committed offsets, the broker's end
offsets and first records) and carries out its decisions: a partition is read again by a seek on
faust's consumer thread (``faust_private.seek_wait``); a hole or a tail is asked of the broker with
a probe consumer of its own (``InputOffsets``, confluent-kafka).

It also keeps the commit bookkeeping, in one place (`note_commit`): which offsets the group accepted,
and when it last accepted a commit of this worker, which is what the gate's membership check asks
(`standing`; docs in ``olstream.streams.runtime.member_gate``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Any

from aiokafka.errors import IllegalStateError
from confluent_kafka import KafkaException
from faust.types import TP

from olstream.shared.kafka_admin import passes_soon
from olstream.streams.input_record import InputRecord
from olstream.streams.input_tracker import Admission, InputTracker, ReadAgain, Ticket
from olstream.streams.runtime import faust_private
from olstream.streams.runtime.chain import Link, Step, Taken
from olstream.streams.runtime.input_offsets import InputOffsets
from olstream.streams.runtime.metrics import INPUT_REREAD
from olstream.streams.runtime.transaction_errors import Fenced

log = logging.getLogger(__name__)

# a leader moving after a broker died is elected within seconds; a dead worker's open transaction
# holding offsets is aborted by the broker within its timeout plus the broker's abort interval
ASSIGN_TIMEOUT_SECONDS = 60.0
NOT_ASSIGNED = -1
"""`InputOrder.admit_at_once`: the assignment's ledgers do not exist yet (`admit` waits for them)."""
HOLE = -2
"""`InputOrder.admit_at_once`: the record found a hole (`hole_found` asks the broker about it)."""


class Standing(Enum):
    """What `InputOrder.standing` says of a record's partition when the gate asks."""

    GONE = "gone"  # its ledger changed (a rebalance began): its next owner reads the record again
    CONFIRMED = "confirmed"  # owned, and the group accepted a commit of this worker recently enough
    UNCONFIRMED = "unconfirmed"  # owned, but no accepted commit recent enough: ask the group first


class InputOrder:
    """Takes input records strictly in offset order per partition, and reads a partition again where
    faust dropped records."""

    def __init__(
        self,
        offsets: InputOffsets,
        consumer: Callable[[], Any],
        topic: str,
        confirm_within: float,
        fenced_by_transactions: bool,
    ) -> None:
        self.tracker = InputTracker()
        self.offsets = offsets
        self.consumer = consumer  # faust's consumer (created lazily by the app)
        self.topic = topic
        self.assigned = asyncio.Event()  # set once the ledgers of the current assignment exist
        self.confirm_within = confirm_within  # a third of the session timeout (at_least_once)
        self.fenced_by_transactions = fenced_by_transactions  # exactly_once: always confirmed
        self.confirmed_at = -math.inf  # monotonic time a commit the group accepted was sent

    # ------------------------------------------------------------------ commits and membership

    def standing(self, partition: int, identity: int) -> Standing:
        """Whether the record admitted with `identity` may be processed now (the gate asks)."""
        if not self.tracker.owns(partition, identity):
            return Standing.GONE
        if self.fenced_by_transactions or time.monotonic() - self.confirmed_at < self.confirm_within:
            return Standing.CONFIRMED
        return Standing.UNCONFIRMED

    def owns(self, partition: int, identity: int) -> bool:
        return self.tracker.owns(partition, identity)

    def note_commit(self, offsets: dict[int, int], sent: float) -> None:
        """The group accepted `offsets`, committed at monotonic time `sent`: the one place a commit is
        booked (the ledgers' committed offsets, and the membership's last confirmation)."""
        self.confirmed_at = sent
        self.tracker.did_commit(offsets)

    def recommit_offset(self, partition: int) -> int | None:
        """The offset to commit again to ask the group whether this worker is still a member."""
        return self.tracker.recommit_offset(partition)

    @contextmanager
    def checkpointing(self) -> Iterator[None]:
        """Around a checkpoint: the tail checks wait meanwhile, and longer after one that took long
        (`InputTracker.checkpoint_ended`); one that raised counts no time."""
        self.tracker.checkpoint_started()
        started = time.monotonic()
        waited = 0.0
        try:
            yield
            waited = time.monotonic() - started
        finally:
            self.tracker.checkpoint_ended(time.monotonic(), waited)

    def commit_positions(self, last_offsets: dict[int, int]) -> dict[int, int]:
        """at_least_once: the batch's records stored through `last_offsets`; the offsets to commit."""
        for partition, offset in last_offsets.items():
            self.tracker.stored(partition, offset)
        return self.tracker.committable()

    def transaction_positions(self, last_offsets: dict[int, int]) -> tuple[dict[int, int], dict[int, int]]:
        """exactly_once: the batch's records are in the transaction through `last_offsets`; the offsets
        that moved, and every owned partition's offset (what the transaction commits)."""
        for partition, offset in last_offsets.items():
            self.tracker.stored(partition, offset)  # in the transaction, which commits the offset with it
        return self.tracker.transaction_offsets()

    def partitions(self) -> list[int]:
        """The partitions of the current assignment's ledgers."""
        return self.tracker.partitions()

    def wait_started(self) -> None:
        """A child waits for its parent: the records behind it are held, not dropped."""
        self.tracker.wait_started()

    def wait_ended(self) -> None:
        self.tracker.wait_ended(time.monotonic())

    def stop(self) -> None:
        """--until-idle decided to stop: nothing taken from now on would be committed."""
        self.tracker.stopping = True

    def rebalancing(self) -> bool:
        """Between a revocation and the next assignment's ledgers."""
        return self.tracker.rebalancing

    # ------------------------------------------------------------------ assignment

    def revoked(self) -> None:
        self.assigned.clear()
        self.tracker.revoked()

    async def positions(
        self, partitions: list[int], timeout: float = ASSIGN_TIMEOUT_SECONDS
    ) -> tuple[dict[int, int], set[int]]:
        """Where each partition starts: the group's committed offset (its earliest offset when the
        group never committed it), and the partitions never committed. The committed offsets are
        stable ones: the broker answers once no transaction holding offsets of them is open (a
        previous owner's, committed or aborted by then). Asked again while that lasts, or while a
        partition's leader or the group's coordinator is moving (a broker failing over), up to
        `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                committed = await self.offsets.committed(partitions) if partitions else {}
                never = [p for p in partitions if p not in committed]
                earliest = await self.offsets.bounds(never) if never else {}
                break
            except KafkaException as e:
                # a broker failing over: a leader moving shows as not-ready errors, or as a local
                # time-out of the watermark request while the partition has no leader; the group's
                # coordinator moving as NOT_COORDINATOR from the committed-offsets request; an open
                # transaction holding offsets as a local time-out of that request
                if time.monotonic() >= deadline or not passes_soon(e.args[0]):
                    raise
                log.info("input partitions %s: asking again where the group stands (%s)", partitions, e)
                await asyncio.sleep(0.5)
        bases = {p: committed[p] if p in committed else earliest[p][0] for p in partitions}
        return bases, set(never)

    def take(self, bases: dict[int, int], never_committed: set[int]) -> None:
        """Start a ledger per partition at its base (`positions`): its records are taken from there."""
        self.tracker.assigned(bases, time.monotonic(), never_committed=never_committed)
        self.assigned.set()

    async def read_again_from_commits(self, partitions: list[int]) -> None:
        """Start the ledgers anew at the group's committed offsets and seek faust's consumer there
        (a dropped batch, with no rebalance to come)."""
        bases, never = await self.positions(partitions)
        self.take(bases, never)
        for partition, offset in sorted(bases.items()):
            log.info("input partition %d: reading again from the committed offset %d", partition, offset)
            await self.seek(partition, offset)

    # ------------------------------------------------------------------ records

    def admit_at_once(self, partition: int, offset: int) -> int | None:
        """The identity of the partition's ledger when the agent takes the record (the next one of its
        partition, in offset order), else None; decided without awaiting anything, except for
        `NOT_ASSIGNED` (ask `admit`) and `HOLE` (ask `hole_found`). The agent checks the identity again
        under its lock (`InputTracker.owns`): a rebalance may have begun while it waited."""
        if not self.assigned.is_set():
            return NOT_ASSIGNED
        verdict = self.tracker.arrived(partition, offset, time.monotonic())
        if verdict is Admission.HOLE:
            return HOLE
        return self.tracker.identity(partition) if verdict is Admission.PROCESS else None

    async def admit(self, partition: int, offset: int) -> int | None:
        """`admit_at_once`, waiting for the assignment's ledgers and asking about a hole."""
        if not self.assigned.is_set():
            await self.assigned.wait()  # records of a new assignment can reach the agent before its ledgers
        taken = self.admit_at_once(partition, offset)
        return await self.hole_found(partition, offset) if taken == HOLE else taken

    async def hole_found(self, partition: int, offset: int) -> int | None:
        """The record at `offset` arrived after a hole: the broker says what lies between (only
        transaction markers: it is taken; records: the partition is read again from the first one)."""
        probe = self.tracker.probe_hole(partition)
        first = await self.first_record_from(partition, probe.ticket.offset)
        decision = self.tracker.hole_probed(probe.ticket, offset, first, time.monotonic())
        if isinstance(decision, ReadAgain):
            await self.read_again(decision)
            return None
        return self.tracker.identity(partition) if decision is Admission.PROCESS else None

    async def first_record_from(self, partition: int, offset: int) -> int | None:
        """The broker's first record of the partition at or after `offset` (its end offset when there
        is none); None when it could not be read (logged)."""
        try:
            return await self.offsets.first_offset_from(partition, offset)
        except KafkaException as e:
            log.warning("could not read input partition %d at offset %d: %s", partition, offset, e)
            return None

    async def read_again(self, decision: ReadAgain) -> None:
        INPUT_REREAD.inc()
        log.warning(
            "input partition %d: records from offset %d were fetched but never reached the agent (%s); "
            "reading the partition again from there",
            decision.partition,
            decision.offset,
            decision.found_by,
        )
        await self.seek(decision.partition, decision.offset)

    async def seek(self, partition: int, offset: int) -> None:
        try:
            await faust_private.seek_wait(self.consumer(), {TP(self.topic, partition): offset})
        except IllegalStateError as e:  # revoked meanwhile: its next owner reads it from the commit
            log.info("input partition %d not read again: %s", partition, e)

    # ------------------------------------------------------------------ timers

    async def retry_rereads(self) -> None:
        """Seek again where a read again brought nothing within the tracker's `reread_after`."""
        for decision in self.tracker.rereads_due(time.monotonic()):
            await self.seek(decision.partition, decision.offset)

    async def catch_up_tails(self) -> None:
        """Look into the partitions that stood quiet behind their end offsets (their last records may
        have been fetched and dropped: nothing arrives after them to show the hole)."""
        tickets = self.tracker.quiet_partitions(time.monotonic())
        if not tickets:
            return
        partitions = sorted(t.partition for t in tickets)
        try:
            bounds = await self.offsets.bounds(partitions)
        except KafkaException as e:
            log.warning("could not read the end offsets of input partitions %s: %s", partitions, e)
            return
        for ticket in tickets:
            await self.look_into_tail(ticket, bounds[ticket.partition][1])

    async def look_into_tail(self, ticket: Ticket, end: int) -> ReadAgain | None:
        """Probe a partition behind `end` from its read position; read it again where records are."""
        probe = self.tracker.tail_end(ticket, end, time.monotonic())
        if probe is None:
            return None
        first = await self.first_record_from(ticket.partition, ticket.offset)
        decision = self.tracker.tail_probed(ticket, end, first, time.monotonic())
        if decision is not None:
            await self.read_again(decision)
        return decision

    async def taken_to_end(self, partition: int, end: int) -> bool:
        """Whether this worker processed and stored every record of the partition below `end` (or the
        broker shows the rest holds none: the markers of the last transaction)."""
        taken = self.tracker.taken_to(partition)
        if taken is None:
            return False
        if taken >= end:
            return True
        ticket = self.tracker.settled_ticket(partition)
        if ticket is None:
            return False
        await self.look_into_tail(ticket, end)
        taken = self.tracker.taken_to(partition)
        return taken is not None and taken >= end

    def describe(self) -> str:
        """A line per assigned input partition (logged on SIGUSR1)."""
        return self.tracker.describe(time.monotonic())


class AdmitInOrder(Link):
    """Step 1: take the record only as the next of its partition, in offset order (`InputOrder`);
    at a poll, seek again where a read again brought nothing."""

    def __init__(self, order: InputOrder, next_step: Step[Taken]) -> None:
        self.order = order
        self.next = next_step

    async def submit(self, item: InputRecord) -> Fenced | None:
        partition, offset = item.partition, item.offset
        taken = self.order.admit_at_once(partition, offset)
        if taken == NOT_ASSIGNED:
            taken = await self.order.admit(partition, offset)
        elif taken == HOLE:
            taken = await self.order.hole_found(partition, offset)
        if taken is None:
            return None  # not the next record of its partition (read again, or from its commit)
        return await self.next.submit(Taken(item, taken))

    async def poll(self) -> Fenced | None:
        fence = await self.next.poll()  # the gate's part first: the rejoin deadline, a quiet batch
        await self.order.retry_rereads()
        return fence

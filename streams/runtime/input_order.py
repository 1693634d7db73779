"""The worker's input order: the runtime side of ``olstream.streams.input_tracker``.

It gives the tracker its facts (a record arrived, the partitions assigned at the group's committed
offsets, the broker's end offsets and first records) and carries out its decisions: a partition is
read again by a seek on faust's consumer thread (``faust_private.seek_wait``); a hole or a tail is
asked of the broker with a probe consumer of its own (``InputOffsets``, confluent-kafka).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aiokafka.errors import IllegalStateError
from confluent_kafka import KafkaException
from faust.types import TP

from olstream.shared.kafka_admin import passes_soon
from olstream.streams.input_tracker import Admission, InputTracker, ReadAgain, Ticket
from olstream.streams.runtime import faust_private
from olstream.streams.runtime.chain import Step, Taken
from olstream.streams.runtime.input_offsets import InputOffsets
from olstream.streams.runtime.metrics import INPUT_REREAD

log = logging.getLogger(__name__)

# a leader moving after a broker died is elected within seconds; a dead worker's open transaction
# holding offsets is aborted by the broker within its timeout plus the broker's abort interval
ASSIGN_TIMEOUT_SECONDS = 60.0
NOT_ASSIGNED = -1
"""`InputOrder.admit_at_once`: the assignment's ledgers do not exist yet (`admit` waits for them)."""
HOLE = -2
"""`InputOrder.admit_at_once`: the record found a hole (`hole_found` asks the broker about it)."""


class InputOrder:
    """Takes input records strictly in offset order per partition, and reads a partition again where
    faust dropped records."""

    def __init__(
        self, tracker: InputTracker, offsets: InputOffsets, consumer: Callable[[], Any], topic: str
    ) -> None:
        self.tracker = tracker
        self.offsets = offsets
        self.consumer = consumer  # faust's consumer (created lazily by the app)
        self.topic = topic
        self.assigned = asyncio.Event()  # set once the ledgers of the current assignment exist

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

    async def assign(self, partitions: list[int], timeout: float = ASSIGN_TIMEOUT_SECONDS) -> None:
        """Start a ledger per assigned partition where the group stands (`positions`). faust seeks the
        partitions there too."""
        self.take(*await self.positions(partitions, timeout))

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


class AdmitInOrder:
    """Step 1: take the record only as the next of its partition, in offset order (`InputOrder`)."""

    def __init__(self, order: InputOrder, next_step: Step) -> None:
        self.order = order
        self.next = next_step

    async def submit(self, item: Taken) -> None:
        partition, offset = item.partition, item.offset
        taken = self.order.admit_at_once(partition, offset)
        if taken == NOT_ASSIGNED:
            taken = await self.order.admit(partition, offset)
        elif taken == HOLE:
            taken = await self.order.hole_found(partition, offset)
        if taken is None:
            return  # not the next record of its partition (read again, or from its commit)
        item.identity = taken
        await self.next.submit(item)

"""The worker's input order: records taken strictly in offset order per input partition, and
`--until-idle`'s end. A mixin of `StreamWorker` (agent.py), kept apart for its size.

faust's own read-offset bookkeeping goes stale around rebalances (olstream.streams.input_ledger),
so the worker keeps a ledger per input partition (`WorkerConsumer.ledgers`): `admit` takes a
record only as the next one of its partition, asks the broker about a hole, and reads the
partition again when records were fetched but never delivered.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import Any, cast

from aiokafka.errors import IllegalStateError
from confluent_kafka import KafkaException

from olstream.shared.idle import behind, consumed_to_end
from olstream.streams.input_ledger import Admission, InputLedger
from olstream.streams.runtime import app as m
from olstream.streams.runtime import faust_private
from olstream.streams.runtime.consumer import WorkerConsumer
from olstream.streams.settings import WorkerSettings

log = logging.getLogger(__name__)

REREAD_SECONDS = 10.0  # a partition read again from a hole is sought again if nothing came by then
# a partition behind its end offset, none of its records on the way, and none reaching the agent for
# this long: records were fetched and dropped at its tail, and it is read again
TAIL_QUIET_SECONDS = 5.0


class InputOrder:
    """What `StreamWorker` does to take its input in order, and to know when it is consumed to its end."""

    sa: m.StreamApp
    settings: WorkerSettings
    input_offsets: m.InputOffsets
    stream: Any
    batch: list[Any]
    stopping: bool
    lock: asyncio.Lock
    slow_flush_ended_at: float
    busy_seconds: float
    flush_seconds: float

    @property
    def consumer(self) -> WorkerConsumer:
        return cast(WorkerConsumer, self.sa.app.consumer)

    def owned_input_tps(self) -> list[Any]:
        """The input topic's partitions currently assigned to this worker."""
        topic = self.settings.input_topic
        return [tp for tp in self.sa.app.consumer.assignment() if tp.topic == topic]

    # ------------------------------------------------------------------ input order

    async def admit(self, event: Any) -> bool:
        """Take the event only as the next record of its input partition (see olstream.streams.input_ledger).

        A record the agent does not take is released without marking its offset: it is taken
        when the partition is read again (after the seek faust makes on every assignment, or the
        one made here for a hole).
        """
        msg = event.message
        ledger = self.consumer.ledgers.get(msg.partition)
        if ledger is not None:
            ledger.seen_at = time.monotonic()
        verdict = Admission.SKIP if ledger is None else ledger.admit(msg.offset)
        if verdict is Admission.HOLE and ledger is not None:
            verdict = await self.look_into_hole(ledger, msg)
        if verdict is Admission.PROCESS:
            return True
        await self.stream.ack(event)  # outside agent_acks: released, its offset not marked
        return False

    async def look_into_hole(self, ledger: InputLedger, msg: Any) -> Admission:
        """Ask the broker what lies between the partition's read position and this record."""
        partition = msg.partition
        first = await self.first_record_from(partition, ledger.next_offset)
        if self.consumer.ledgers.get(partition) is not ledger:
            return Admission.SKIP  # sought or revoked meanwhile: the ledger started over
        if first is not None and first >= msg.offset:
            ledger.pass_absent(msg.offset)  # no records in between (transaction markers)
            return ledger.admit(msg.offset)
        if first is not None:
            ledger.pass_absent(first)
        await self.reread(ledger, partition, f"offset {msg.offset} arrived first")
        return Admission.SKIP

    async def first_record_from(self, partition: int, offset: int) -> int | None:
        """The broker's first record of the partition at or after `offset` (its end offset when there
        is none); None when it could not be read (logged)."""
        try:
            return await self.input_offsets.first_offset_from(partition, offset)
        except KafkaException as e:
            log.warning("could not read input partition %d at offset %d: %s", partition, offset, e)
            return None

    async def reread(self, ledger: InputLedger, partition: int, found_by: str) -> None:
        offset = ledger.request_reread(time.monotonic())
        m.INPUT_REREAD.inc()
        log.warning(
            "input partition %d: records from offset %d were fetched but never reached the agent (%s); "
            "reading the partition again from there",
            partition,
            offset,
            found_by,
        )
        await self.seek_input(partition, offset)

    async def seek_input(self, partition: int, offset: int) -> None:
        try:
            await self.consumer.read_input_again(partition, offset)
        except IllegalStateError as e:  # revoked meanwhile: its next owner reads it from the commit
            log.info("input partition %d not read again: %s", partition, e)

    async def pass_trailing_markers(self, partition: int, ledger: InputLedger, high: int) -> bool:
        """Whether the partition's tail from the read position up to `high` holds no records.

        A hole is found when a record past it arrives, and none arrives after the transaction
        marker that ends the last transaction: asked only once everything taken is acked.
        """
        expected = ledger.next_offset
        if self.batch or expected >= high or ledger.advance() != expected:
            return False
        first = await self.input_offsets.first_offset_from(partition, expected)
        if first is None or first < high:
            return False
        if self.consumer.ledgers.get(partition) is not ledger or ledger.next_offset != expected:
            return False
        ledger.pass_absent(high)  # transaction markers only
        return True

    async def retry_rereads(self) -> None:
        """Read again from where a read from a hole brought nothing within REREAD_SECONDS.

        Without the reread mark, the first record fetched past the read position is a hole again
        and the broker is asked again (a marker the first answer missed is passed then).
        """
        now = time.monotonic()
        for partition, ledger in list(self.consumer.ledgers.items()):
            if ledger.reread_since is not None and now - ledger.reread_since >= REREAD_SECONDS:
                ledger.reread_since = None
                await self.seek_input(partition, ledger.next_offset)

    async def catch_up_tails(self) -> None:
        """Read again a partition whose last records were fetched but never reached the agent.

        `admit` finds dropped records when a later record of their partition arrives. faust's
        stream drops the records fetched before a rebalance, and when those are a partition's
        last ones nothing arrives after them: the partition stood still, nothing committed, until
        new records were appended (a broker killed under load left runs undelivered for minutes).
        A partition is read again from its read position when it is behind its end offset, none
        of its records are taken and unacked, and none reached the agent for TAIL_QUIET_SECONDS,
        while the agent waits for input; a tail of transaction markers only is passed instead.
        """
        now = time.monotonic()
        if not self.agent_waits_for_input(now):
            return
        on_the_way = faust_private.unacked_partitions(self.consumer, self.settings.input_topic)
        quiet = {
            partition: (ledger, ledger.next_offset)
            for partition, ledger in self.consumer.ledgers.items()
            if ledger.reread_since is None
            and partition not in on_the_way
            and now - ledger.seen_at >= TAIL_QUIET_SECONDS
        }
        for ledger, _ in quiet.values():
            ledger.seen_at = now  # checked (or failed to): asked again after another quiet stretch
        if not quiet:
            return
        try:
            bounds = await self.input_offsets.bounds(sorted(quiet))
        except KafkaException as e:
            log.warning("could not read the end offsets of input partitions %s: %s", sorted(quiet), e)
            return
        for partition, (ledger, expected) in quiet.items():
            high = bounds[partition][1]
            if expected >= high or not self.still_quiet(partition, ledger, expected, now):
                continue
            first = await self.first_record_from(partition, expected)
            if first is None or not self.still_quiet(partition, ledger, expected, now):
                continue
            if first >= high:
                ledger.pass_absent(high)  # transaction markers only
                continue
            ledger.pass_absent(first)
            await self.reread(ledger, partition, f"none for {TAIL_QUIET_SECONDS:.0f} s, end offset {high}")

    def agent_waits_for_input(self, now: float) -> bool:
        """Neither a rebalance, a stop nor the agent's own work holds records back: records of a
        quiet partition queued for the agent (not yet taken, so in no unacked set) would reach it.
        A batch whose sends waited a second or more (a broker failing over) counts as holding the
        queue back for TAIL_QUIET_SECONDS after it ends."""
        return not (
            self.stopping
            or self.sa.app.rebalancing
            or self.lock.locked()
            or now - self.slow_flush_ended_at < TAIL_QUIET_SECONDS
        )

    def still_quiet(self, partition: int, ledger: InputLedger, expected: int, since: float) -> bool:
        """Nothing of the partition moved while the broker was asked (checked after each await)."""
        return (
            self.consumer.ledgers.get(partition) is ledger
            and ledger.next_offset == expected
            and ledger.reread_since is None
            and ledger.seen_at <= since
            and self.agent_waits_for_input(time.monotonic())
            and partition not in faust_private.unacked_partitions(self.consumer, self.settings.input_topic)
        )

    def describe_input(self) -> str:
        """A line per assigned input partition: read position, commit base, the last record's age,
        records on the way to the agent, a read again under way (logged on SIGUSR1)."""
        now = time.monotonic()
        on_the_way = faust_private.unacked_partitions(self.consumer, self.settings.input_topic)
        lines = []
        for partition, ledger in sorted(self.consumer.ledgers.items()):
            again = "no" if ledger.reread_since is None else f"since {now - ledger.reread_since:.1f} s"
            lines.append(
                f"input partition {partition}: read position {ledger.next_offset}, commit base "
                f"{ledger.base}, last record {now - ledger.seen_at:.1f} s ago, records on the way: "
                f"{'yes' if partition in on_the_way else 'no'}, read again: {again}"
            )
        return "\n".join(lines) or "no input partition assigned"

    # ------------------------------------------------------------------ --until-idle

    async def input_positions(
        self, end_offsets: Any, partitions: list[int]
    ) -> tuple[dict[int, tuple[int, int]], dict[int, int]]:
        """The watermarks of `partitions` and the group's committed offsets on the broker.

        The commits are read first: a commit at or past an end offset read after it covers every
        record there was.
        """
        committed = await self.input_offsets.committed(partitions)
        bounds: dict[int, tuple[int, int]] = await end_offsets(partitions)
        return bounds, committed

    async def taken_to_end(self, partitions: list[int], bounds: dict[int, tuple[int, int]]) -> bool:
        """Whether this process took and acked every record of `partitions` (or the broker showed
        the rest holds none), so that a commit now covers them up to their end offsets."""
        for partition in partitions:
            ledger = self.consumer.ledgers.get(partition)
            if ledger is None:
                return False  # not sought on this assignment yet: nothing of it taken here
            high = bounds[partition][1]
            if ledger.advance() < high and not await self.pass_trailing_markers(partition, ledger, high):
                return False
        return True

    async def check_idle(self, end_offsets: Any) -> None:
        """Stop the worker (exit 0) once every assigned input partition is processed, acked and committed.

        The truth is the group's committed offsets on the broker, not what this process saw: a
        partition committed to its end is done, even when this process never took one of its
        records (a restart over a finished input, a partition taken over from a worker that finished
        it). A partition behind is done only once this process has taken and acked every record of
        it (its ledger, from the seek faust made on this assignment) or the broker shows the rest
        empty (the markers of the last transaction), and the commit that follows reached the end.
        Nothing is decided during a rebalance, with records taken but not flushed, or when the
        assignment changed while the broker was asked.
        """
        if self.stopping:
            return
        tps = self.owned_input_tps()
        if not tps or self.sa.app.rebalancing or self.batch:
            return
        partitions = sorted(tp.partition for tp in tps)
        try:
            bounds, committed = await self.input_positions(end_offsets, partitions)
            late = behind(bounds, committed)
            if late:
                if not await self.taken_to_end(late, bounds):
                    return
                await self.consumer.commit()
                bounds, committed = await self.input_positions(end_offsets, partitions)
                if not consumed_to_end(bounds, committed):
                    return
        except KafkaException as e:
            log.warning("--until-idle: could not read the input's offsets (asking again): %s", e)
            return
        if self.stopping or self.sa.app.rebalancing or self.batch or set(self.owned_input_tps()) != set(tps):
            return  # the assignment or the batch changed while the broker was asked: decide again
        self.stopping = True
        log.info(
            "input consumed to its end, every send acknowledged and offsets committed: stopping "
            "(%.1f s processing records, %.1f s flushing batches)",
            self.busy_seconds,
            self.flush_seconds,
        )
        os.kill(os.getpid(), signal.SIGTERM)

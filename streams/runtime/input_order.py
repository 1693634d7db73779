"""The worker's input order: records taken strictly in offset order per input partition, and
`--until-idle`'s end. A mixin of `StreamWorker` (agent.py), kept apart for its size.

faust's own read-offset bookkeeping goes stale around rebalances (olstream.streams.input_ledger),
so the worker keeps a ledger per input partition (`WorkerConsumer.ledgers`): `admit` takes a
record only as the next one of its partition, asks the broker about a hole, and reads the
partition again when records were fetched but never delivered.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any, cast

from aiokafka.errors import IllegalStateError
from confluent_kafka import KafkaException

from olstream.shared.idle import consumed_to_end
from olstream.streams.input_ledger import Admission, InputLedger
from olstream.streams.runtime import app as m
from olstream.streams.runtime import faust_private
from olstream.streams.runtime.consumer import WorkerConsumer
from olstream.streams.settings import WorkerSettings

log = logging.getLogger(__name__)

REREAD_SECONDS = 10.0  # a partition read again from a hole is sought again if nothing came by then


class InputOrder:
    """What `StreamWorker` does to take its input in order, and to know when it is consumed to its end."""

    sa: m.StreamApp
    settings: WorkerSettings
    input_offsets: m.InputOffsets
    stream: Any
    batch: list[Any]
    stopping: bool
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
        verdict = Admission.SKIP if ledger is None else ledger.admit(msg.offset)
        if verdict is Admission.HOLE and ledger is not None:
            verdict = await self.look_into_hole(ledger, msg)
        if verdict is Admission.PROCESS:
            return True
        await self.stream.ack(event)  # outside agent_acks: released, its offset not marked
        return False

    async def look_into_hole(self, ledger: InputLedger, msg: Any) -> Admission:
        """Ask the broker what lies between the partition's read position and this record."""
        partition, expected = msg.partition, ledger.next_offset
        try:
            first = await self.input_offsets.first_offset_from(partition, expected)
        except KafkaException as e:
            log.warning("could not read input partition %d at offset %d: %s", partition, expected, e)
            first = None
        if self.consumer.ledgers.get(partition) is not ledger:
            return Admission.SKIP  # sought or revoked meanwhile: the ledger started over
        if first is not None and first >= msg.offset:
            ledger.pass_absent(msg.offset)  # no records in between (transaction markers)
            return ledger.admit(msg.offset)
        if first is not None:
            ledger.pass_absent(first)
        await self.reread(ledger, partition)
        return Admission.SKIP

    async def reread(self, ledger: InputLedger, partition: int) -> None:
        offset = ledger.request_reread(time.monotonic())
        m.INPUT_REREAD.inc()
        log.warning(
            "input partition %d: records from offset %d were fetched but never reached the agent; "
            "reading the partition again from there",
            partition,
            offset,
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

    # ------------------------------------------------------------------ --until-idle

    async def check_idle(self, end_offsets: Any) -> None:
        """Stop the worker (exit 0) once every assigned input partition is processed, acked and committed."""
        if self.stopping:
            return
        app = self.sa.app
        consumer = app.consumer
        tps = self.owned_input_tps()
        if not tps or app.rebalancing:
            return
        bounds = await end_offsets([tp.partition for tp in tps])
        for tp in tps:
            low, high = bounds[tp.partition]
            if high <= low:
                continue
            ledger = self.consumer.ledgers.get(tp.partition)
            if ledger is None:
                return
            if ledger.advance() < high and not await self.pass_trailing_markers(tp.partition, ledger, high):
                return
        await consumer.commit()
        committed = {tp.partition: faust_private.committed_offset(consumer, tp) for tp in tps}
        if not consumed_to_end({tp.partition: bounds[tp.partition] for tp in tps}, committed):
            return
        self.stopping = True
        log.info(
            "input consumed to its end, every send acknowledged and offsets committed: stopping "
            "(%.1f s processing records, %.1f s flushing batches)",
            self.busy_seconds,
            self.flush_seconds,
        )
        os.kill(os.getpid(), signal.SIGTERM)



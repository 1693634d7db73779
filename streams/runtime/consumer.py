"""The worker's faust consumer: on the input topic, only the agent's acks count towards commits.

faust-streaming's stream acks a record it drops without handing it to the agent: one
fetched before a rebalance (an older consumer generation) or taken while the flow is
suspended. An ack marks the offset safe to commit, so such a record could be committed
over although no agent processed it, and faust's commit takes the first run of
consecutive acked offsets (after a rebalance it starts from whatever was acked). The
agent acks only what it processed and whose events the broker acknowledged
(``StreamWorker.flush_batch``), inside :meth:`WorkerConsumer.agent_acks`; any other ack on
the input topic releases the record without marking its offset.

faust's own commit position (``_new_offset``: acked offsets plus the "gaps" its fetch
bookkeeping believes it saw) and its read offsets are not used for the input topic: a
:class:`olstream.streams.input_ledger.InputLedger` per assigned input partition decides what the agent
takes and what is committed, starting from the broker's committed offset each time faust seeks
the partition. A partition the group never committed is sought to its earliest offset
explicitly (aiokafka leaves such a partition wherever its fetcher stopped).

The private names of faust this needs are reached through
:mod:`olstream.streams.runtime.faust_private`, which declares the methods overridden here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

from faust.types import TP, AppT

from olstream.streams.input_ledger import InputLedger
from olstream.streams.runtime import faust_private

log = logging.getLogger(__name__)


class ReadOffsetsWithoutInput(dict[Any, int | None]):
    """faust's read offsets, never any for the input topic.

    faust drops a fetched record below its read offset as already read and counts the
    offsets between two fetched ones as a gap to commit over; both went wrong with read
    offsets written back after a revocation. For the input topic the ledger does that job.
    """

    def __init__(self, input_topic: str) -> None:
        super().__init__()
        self._input_topic = input_topic

    def __missing__(self, key: Any) -> None:
        return None

    def __getitem__(self, key: Any) -> int | None:
        if key.topic == self._input_topic:
            return None
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: int | None) -> None:
        if key.topic != self._input_topic:
            super().__setitem__(key, value)


class WorkerConsumer(faust_private.AiokafkaConsumer):
    """faust's aiokafka consumer, counting only the agent's acks on the input topic."""

    _agent_acking = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.ledgers: dict[int, InputLedger] = {}  # input partition -> its commit ledger
        super().__init__(*args, **kwargs)
        faust_private.replace_read_offsets(self, ReadOffsetsWithoutInput(self.input_topic))

    @property
    def input_topic(self) -> str:
        return cast(WorkerTransport, self.transport).input_topic

    # ------------------------------------------------------------------ assignment and seeks

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        for tp in revoked:
            if tp.topic == self.input_topic:
                self.ledgers.pop(tp.partition, None)
        await super().on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TP], generation_id: int = 0) -> None:
        owned = {tp.partition for tp in assigned if tp.topic == self.input_topic}
        for partition in list(self.ledgers):
            if partition not in owned:
                del self.ledgers[partition]
        await super().on_partitions_assigned(assigned, generation_id)

    async def seek_to_committed(self) -> Mapping[TP, int]:
        """Seek to the committed offsets, and restart each input partition's ledger there."""
        committed = await super().seek_to_committed()
        uncommitted = [
            TP(tp.topic, tp.partition)
            for tp, offset in committed.items()
            if tp.topic == self.input_topic and (offset is None or offset <= 0)
        ]
        earliest = await faust_private.earliest_offsets(self, *uncommitted) if uncommitted else {}
        for tp, offset in committed.items():
            if tp.topic != self.input_topic:
                continue
            if offset is None or offset <= 0:
                offset = earliest.get(TP(tp.topic, tp.partition)) or 0
                # on the consumer's thread
                await faust_private.seek_wait(self, {TP(tp.topic, tp.partition): offset})
            self.ledgers[tp.partition] = InputLedger(offset, seen_at=time.monotonic())
        return committed

    async def read_input_again(self, partition: int, offset: int) -> None:
        """Seek an input partition back (on the consumer's thread, as faust's own seeks run there).

        Raises aiokafka's IllegalStateError when the partition is no longer assigned.
        """
        await faust_private.seek_wait(self, {TP(self.input_topic, partition): offset})

    async def _add_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        if tp.topic != self.input_topic:  # the input's gaps are the ledger's business
            await super()._add_gap(tp, offset_from, offset_to)

    # ------------------------------------------------------------------ commits

    def _filter_tps_with_pending_acks(self, topics: Any = None) -> Iterator[TP]:
        seen = set()
        for tp in super()._filter_tps_with_pending_acks(topics):
            seen.add(tp)
            yield tp
        for partition in list(self.ledgers):
            tp = TP(self.input_topic, partition)
            if tp not in seen and (topics is None or tp in topics or self.input_topic in topics):
                yield tp

    def _new_offset(self, tp: TP) -> int | None:
        if tp.topic != self.input_topic:
            offset: int | None = super()._new_offset(tp)
            return offset
        ledger = self.ledgers.get(tp.partition)
        if ledger is None:
            return None
        return ledger.advance()

    @contextmanager
    def agent_acks(self) -> Iterator[None]:
        """Acks given inside this block are the agent's (processed and flushed records)."""
        self._agent_acking = True
        try:
            yield
        finally:
            self._agent_acking = False

    def ack(self, message: Any) -> bool:
        if message.topic != self.input_topic:
            return bool(super().ack(message))
        if self._agent_acking:
            with faust_private.ack_lock():
                if message.acked:
                    return False
                message.acked = True
                faust_private.forget_unacked(self, message)
                ledger = self.ledgers.get(message.partition)
                if ledger is not None:
                    ledger.note_acked(message.offset)
                faust_private.count_ack(self)
            return True
        # a record faust's stream dropped: released (a rebalance does not wait for it), but its
        # offset is not marked safe to commit; the partition's owner reads it again
        with faust_private.ack_lock():  # faust's own ack holds it for the same fields
            message.acked = True
            faust_private.forget_unacked(self, message)
        return False


class WorkerTransport(faust_private.AiokafkaTransport):
    """faust's aiokafka transport with :class:`WorkerConsumer`."""

    Consumer = WorkerConsumer
    input_topic = ""


def use_worker_consumer(app: AppT, input_topic: str) -> None:
    """Give the app the worker's transport (before anything created its consumer)."""
    transport = WorkerTransport(app.conf.broker_consumer, app)
    transport.input_topic = input_topic
    app.transport = transport

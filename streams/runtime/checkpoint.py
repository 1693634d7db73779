"""The batch and its checkpoint: the one place the worker's input offsets are committed.

A batch is the records processed since the last checkpoint (``batch_size`` records, or
``batch_within`` seconds, or a rebalance). Its checkpoint makes the batch durable in Kafka, then
stores its state locally, never the other way round:

`Checkpoint.run` runs its steps in order:

1. **sends acknowledged** (``at_least_once``): every event the batch sent (output and errors topics)
   was acknowledged by the broker (``Sender.flush``; ``acks=all``, idempotent). A failed send ends
   the process at once: nothing of the batch is stored or committed, and its records are processed
   again, re-emitting identical bytes. Under ``exactly_once`` the sends are in the transactions.
2. **changelog written**: each input partition's run states, then its log marks, sent to its
   changelog partition (``RunTable.prepare_batch``, each partition's ``PartitionState.prepare``):
   to the ``ChangelogWriter``, or under ``exactly_once`` into the worker's open transaction,
   beside the events and error records the batch produced.
3. **changelog durable**: acknowledged (``ChangelogWriter.flush``; a state that says "ended"
   implies its START and terminal event were acknowledged), or under ``exactly_once`` the
   worker's transaction committed with the input offsets of every owned partition
   (``olstream.streams.runtime.transactions``): events, error records, state and offsets become
   visible together, or (aborted) not at all.
4. **state stored**: the same writes in each partition's store, with the changelog offset past them
   (``RunTable.store_batch``).
5. **offsets committed** (``at_least_once``): the contiguous processed prefix of each input partition
   (``InputTracker.committable``; an offset never goes backwards, asserted there).

A crash between any two steps leaves the input uncommitted past the last checkpoint (under
``exactly_once``, nothing visible to a read_committed reader before 3): the records are processed
again, and the marks (``olstream.streams.log_marks``) skip what was stored already. A crash between
3 and 4 leaves the store behind its changelog: the next start restores the tail.

Membership (``at_least_once``) and fencing (``exactly_once``) are the gate's
(``olstream.streams.runtime.member_gate``): an accepted commit here is booked with the input order
(`InputOrder.note_commit`), which the gate asks, and a fenced transaction is returned to the gate,
which drops the batch.

`BatchCheckpoint` is the chain's last step: it counts each record into the batch and runs the
checkpoint when the batch is full, when the chain is joined (a rebalance, --until-idle), and when it
is polled with a batch older than ``batch_within`` (a quiet batch); always under the gate's lock.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass, field

from faust.types import TP

from olstream.shared.errors import DeliveryError
from olstream.streams.partition_state import ChangelogSend
from olstream.streams.runtime.chain import ChainReport, Taken
from olstream.streams.runtime.changelog import ChangelogWriter
from olstream.streams.runtime.exits import exit_on_failed_delivery, exit_on_unexpected
from olstream.streams.runtime.input_order import InputOrder
from olstream.streams.runtime.member_gate import Commit
from olstream.streams.runtime.metrics import BATCH_SECONDS, RETAINED
from olstream.streams.runtime.run_table import RunTable
from olstream.streams.runtime.sender import Sender
from olstream.streams.runtime.transaction_errors import Fenced
from olstream.streams.runtime.transactions import WorkerTransactions

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Batch:
    """The records processed since the last checkpoint."""

    started: float = 0.0  # monotonic time of its first record
    size: int = 0
    last_offsets: dict[int, int] = field(default_factory=dict)  # input partition -> its last offset
    # input partition -> {log partition: the highest log offset of its records}
    log_offsets: dict[int, dict[int, int]] = field(default_factory=dict)


class Checkpoint:
    """Runs a batch's checkpoint (`run`: its numbered steps, module docstring)."""

    def __init__(
        self,
        input_topic: str,
        sender: Sender,
        table: RunTable,
        changelog: ChangelogWriter,
        commit: Commit,
        order: InputOrder,
        report: ChainReport,
        transactions: WorkerTransactions | None = None,
    ) -> None:
        self.input_topic = input_topic
        self.sender = sender
        self.table = table
        self.changelog = changelog
        self.commit = commit
        self.order = order
        self.report = report
        self.transactions = transactions
        # the batch's state changes: to the changelog writer, or into the worker's transaction
        self.changelog_send: ChangelogSend = (
            changelog.send
            if transactions is None
            else functools.partial(transactions.send_changelog, changelog.topic)
        )

    async def run(self, batch: Batch) -> Fenced | None:
        """The batch's checkpoint, its steps numbered as in the module docstring (an empty batch
        commits what the ledgers passed over). A failed send ends the process; a fenced transaction is
        returned (the gate drops the batch)."""
        started = time.perf_counter()
        order, table, transactions = self.order, self.table, self.transactions
        try:
            with order.checkpointing():  # the tail checks wait; a slow checkpoint holds them longer
                # 1. at_least_once: every send of the batch acknowledged (exactly_once: in the transaction)
                if transactions is None and batch.size:
                    await self.sender.flush()
                # 2. the batch's state to the changelog: each partition's run states, then its marks
                writes = table.prepare_batch(self.changelog_send) if batch.size else []
                # 3. the changelog durable: acknowledged; under exactly_once the worker's transaction
                #    committed with the input offsets (every owned partition's, when anything is to
                #    commit: each transaction carries the group's generation check)
                if transactions is not None:
                    offsets, every = order.transaction_positions(batch.last_offsets)
                    sent = time.monotonic()
                    next_changelog = await asyncio.get_running_loop().run_in_executor(
                        None, transactions.commit, every if offsets or transactions.open else {}
                    )
                    if offsets:
                        order.note_commit(offsets, sent)
                else:
                    next_changelog = await self.changelog.flush() if batch.size else {}
                # 4. the state stored, with the changelog offset past it (a restart restores the tail)
                table.store_batch(writes, next_changelog)
                # 5. at_least_once: the contiguous processed prefix of each input partition committed
                if transactions is None:
                    offsets = order.commit_positions(batch.last_offsets)
                    tps = {}
                    for partition, offset in offsets.items():
                        tps[TP(self.input_topic, partition)] = offset
                    sent = time.monotonic()
                    if offsets and await self.commit(tps):
                        order.note_commit(offsets, sent)
                    elif offsets:
                        log.info("input offsets %s not committed (a rebalance took the partitions)", offsets)
            for partition, log_offsets in batch.log_offsets.items():
                table.committed_log.note_acked(partition, batch.last_offsets[partition], log_offsets)
        except Fenced as e:
            return e
        except DeliveryError as e:
            exit_on_failed_delivery(e)
        except Exception as e:  # not caught to go on: the process ends here
            exit_on_unexpected("checkpointing a batch", e)
        elapsed = time.perf_counter() - started
        self.report.checkpoint_seconds += elapsed
        RETAINED.set(table.retention.retained)
        BATCH_SECONDS.set(elapsed)
        log.debug("batch of %d records checkpointed in %.3f s", batch.size, elapsed)
        return None


class BatchCheckpoint:
    """Step 7: counts each record into the batch, and checkpoints the batch when it is full, when the
    chain is joined, and when a poll finds it older than `batch_within` (a quiet batch waits at most
    that, plus the poll's interval). A closed chain drops the batch: after a join it is empty; after
    a fence nothing of it was committed.

    Runs under the gate's lock, as every checkpoint does; an exception in a checkpoint ends the
    process (`exit_on_unexpected`); a fence is returned to the gate."""

    def __init__(
        self, checkpoint: Checkpoint, batch_size: int, batch_within: float, report: ChainReport
    ) -> None:
        self.checkpoint = checkpoint
        self.batch_size = batch_size
        self.batch_within = batch_within
        self.report = report
        self.batch = Batch()

    async def submit(self, item: Taken) -> Fenced | None:
        batch, partition, record = self.batch, item.input.partition, item.record
        if not batch.size:
            batch.started = time.monotonic()
        batch.size += 1
        batch.last_offsets[partition] = item.input.offset  # records are taken in offset order
        if record is not None:  # the highest log offset of each log partition among its records
            log_offsets = batch.log_offsets.get(partition)
            if log_offsets is None:
                log_offsets = batch.log_offsets[partition] = {}
            if record.offset > log_offsets.get(record.partition, -1):
                log_offsets[record.partition] = record.offset
        self.report.batched = batch.size
        if batch.size < self.batch_size:
            return None
        started = time.perf_counter()
        self.batch = Batch()
        fence = await self.checkpoint.run(batch)
        if fence is None:
            self.report.batched = 0
        self.report.full_batch_seconds += time.perf_counter() - started
        return fence

    async def assign(self, partitions: list[int]) -> None:
        pass  # the batch is empty between a revocation and the next assignment

    async def join(self) -> Fenced | None:
        """Checkpoint the batch (the caller holds the gate's lock). After a fence the batch's size stays
        reported: the gate says how many records it drops."""
        batch, self.batch = self.batch, Batch()
        fence = await self.checkpoint.run(batch)
        if fence is None:
            self.report.batched = 0
        return fence

    async def close(self) -> None:
        """Drop the batch: empty after a join; after a fence nothing of it was committed."""
        self.batch = Batch()
        self.report.batched = 0

    async def poll(self) -> Fenced | None:
        batch = self.batch
        if batch.size and time.monotonic() - batch.started >= self.batch_within:
            return await self.join()
        return None

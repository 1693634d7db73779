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
(``olstream.streams.runtime.member_gate``): an accepted commit here counts for `Membership`, and a
fenced transaction drops the batch through the gate's `abandon`.

`BatchCheckpoint` is the chain's last step: it counts each record into the batch and runs the
checkpoint when the batch is full (the timer and a rebalance run it too, under the gate's lock).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from faust.types import TP

from olstream.contract.records import Record
from olstream.shared.errors import DeliveryError
from olstream.streams.input_tracker import InputTracker
from olstream.streams.partition_state import ChangelogSends
from olstream.streams.runtime.chain import Taken
from olstream.streams.runtime.changelog import ChangelogWriter
from olstream.streams.runtime.exits import exit_on_failed_delivery, exit_on_unexpected
from olstream.streams.runtime.member_gate import Commit, Membership
from olstream.streams.runtime.metrics import BATCH_SECONDS, RETAINED
from olstream.streams.runtime.run_table import RunTable
from olstream.streams.runtime.sender import Sender
from olstream.streams.runtime.transaction_errors import Fenced
from olstream.streams.runtime.transactions import WorkerTransactions

log = logging.getLogger(__name__)

OnFenced = Callable[[Fenced], Awaitable[None]]


@dataclass(slots=True)
class Batch:
    """The records processed since the last checkpoint."""

    started: float = 0.0  # monotonic time of its first record
    size: int = 0
    last_offsets: dict[int, int] = field(default_factory=dict)  # input partition -> its last offset
    # input partition -> {log partition: the highest log offset of its records}
    log_offsets: dict[int, dict[int, int]] = field(default_factory=dict)

    def add(self, partition: int, offset: int, record: Record | None) -> None:
        """Count the record at `offset` of input `partition` (`record`: its decoded log record)."""
        if not self.size:
            self.started = time.monotonic()
        self.size += 1
        self.last_offsets[partition] = offset  # records are taken in offset order
        if record is not None:
            log_offsets = self.log_offsets.get(partition)
            if log_offsets is None:
                log_offsets = self.log_offsets[partition] = {}
            if record.offset > log_offsets.get(record.partition, -1):
                log_offsets[record.partition] = record.offset


class TransactionalChangelog:
    """The changelog writes of a batch, into the worker's transaction (exactly_once)."""

    def __init__(self, transactions: WorkerTransactions, topic: str) -> None:
        self.transactions = transactions
        self.topic = topic

    def send(self, partition: int, key: bytes, value: bytes | None) -> None:
        self.transactions.send_changelog(self.topic, partition, key, value)


class Checkpoint:
    """Runs a batch's checkpoint (`run`: its numbered steps, module docstring)."""

    def __init__(
        self,
        input_topic: str,
        sender: Sender,
        table: RunTable,
        changelog: ChangelogWriter,
        commit: Commit,
        tracker: InputTracker,
        membership: Membership,
        transactions: WorkerTransactions | None = None,
        on_fenced: OnFenced | None = None,
    ) -> None:
        self.input_topic = input_topic
        self.sender = sender
        self.table = table
        self.changelog = changelog
        self.commit = commit
        self.tracker = tracker
        self.membership = membership
        self.seconds = 0.0  # time spent in checkpoints
        self.transactions = transactions
        self.on_fenced = on_fenced
        self.changelog_sends: ChangelogSends = (
            changelog if transactions is None else TransactionalChangelog(transactions, changelog.topic)
        )

    async def run(self, batch: Batch) -> None:
        """The batch's checkpoint, its steps numbered as in the module docstring (an empty batch
        commits what the tracker passed over). A failed send ends the process; a fenced transaction
        drops the batch (`on_fenced`)."""
        started = time.perf_counter()
        tracker, table, exactly_once = self.tracker, self.table, self.transactions is not None
        tracker.checkpoint_started()
        waited = 0.0
        try:
            waiting = time.monotonic()
            try:
                # 1. at_least_once: every send of the batch acknowledged (exactly_once: in the transactions)
                if not exactly_once and batch.size:
                    await self.sender.flush()
                # 2. the batch's state to the changelog: each partition's run states, then its marks
                writes = table.prepare_batch(self.changelog_sends) if batch.size else []
                # 3. the changelog durable: acknowledged; under exactly_once the worker's
                #    transaction committed with the input offsets
                if exactly_once:
                    next_changelog = await self.commit_transactions(batch)
                else:
                    next_changelog = await self.changelog.flush() if batch.size else {}
                # 4. the state stored, with the changelog offset past it (a restart restores the tail)
                table.store_batch(writes, next_changelog)
                # 5. at_least_once: the contiguous processed prefix of each input partition committed
                if not exactly_once:
                    for partition, offset in batch.last_offsets.items():
                        tracker.stored(partition, offset)
                    offsets = tracker.committable()
                    sent = time.monotonic()
                    if offsets and await self.commit(
                        {TP(self.input_topic, p): o for p, o in offsets.items()}
                    ):
                        self.membership.confirmed_at = sent
                        tracker.did_commit(offsets)
                    elif offsets:
                        log.info("input offsets %s not committed (a rebalance took the partitions)", offsets)
            except Fenced as e:
                if self.on_fenced is None:
                    exit_on_failed_delivery(e)
                await self.on_fenced(e)
                return
            except DeliveryError as e:
                exit_on_failed_delivery(e)
            waited = time.monotonic() - waiting
            for partition, log_offsets in batch.log_offsets.items():
                table.committed_log.note_acked(partition, batch.last_offsets[partition], log_offsets)
        finally:
            tracker.checkpoint_ended(time.monotonic(), waited)
        elapsed = time.perf_counter() - started
        self.seconds += elapsed
        RETAINED.set(table.retention.retained)
        BATCH_SECONDS.set(elapsed)
        log.debug("batch of %d records checkpointed in %.3f s", batch.size, elapsed)

    async def commit_transactions(self, batch: Batch) -> dict[int, int]:
        """Step 3 under exactly_once: the worker's transaction committed with the input offsets (every
        owned partition's, when anything is to commit: each transaction carries the generation check)."""
        transactions = self.transactions
        assert transactions is not None
        for partition, offset in batch.last_offsets.items():
            self.tracker.stored(partition, offset)  # in the transaction, which commits the offset with it
        offsets, every = self.tracker.transaction_offsets()
        sent = time.monotonic()
        next_changelog = await asyncio.get_running_loop().run_in_executor(
            None, transactions.commit, every if offsets or transactions.open else {}
        )
        if offsets:
            self.membership.confirmed_at = sent
            self.tracker.did_commit(offsets)
        return next_changelog


class BatchCheckpoint:
    """Step 7: counts each record into the batch, and checkpoints the batch when it is full.

    Runs under the gate's lock, as every checkpoint does (the timer's and a rebalance's through
    `join`); an exception in a checkpoint ends the process (`exit_on_unexpected`)."""

    def __init__(self, checkpoint: Checkpoint, batch_size: int) -> None:
        self.checkpoint = checkpoint
        self.batch_size = batch_size
        self.batch = Batch()
        self.full_seconds = 0.0  # time in the checkpoints of full batches (run from `submit`)

    async def submit(self, item: Taken) -> None:
        self.batch.add(item.partition, item.offset, item.record)
        if self.batch.size >= self.batch_size:
            started = time.perf_counter()
            await self.join()
            self.full_seconds += time.perf_counter() - started

    async def join(self) -> None:
        """Checkpoint the batch (the caller holds the gate's lock)."""
        batch, self.batch = self.batch, Batch()
        try:
            await self.checkpoint.run(batch)
        except Exception as e:  # not caught to go on: the process ends here
            exit_on_unexpected("checkpointing a batch", e)

    def drop(self) -> int:
        """Drop the batch (fenced: nothing of it was committed); its size."""
        size, self.batch = self.batch.size, Batch()
        return size

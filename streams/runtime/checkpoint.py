"""The batch and its checkpoint: the one place the worker's input offsets are committed.

A batch is the records processed since the last checkpoint (``batch_size`` records, or
``batch_within`` seconds, or a rebalance). Its checkpoint makes the batch durable in Kafka, then
stores its state locally, never the other way round:

``at_least_once``:

1. **sends acknowledged**: every event the batch sent (output and errors topics) was acknowledged by
   the broker (``Sender.flush``; ``acks=all``, idempotent). A failed send ends the process at once:
   nothing of the batch is stored or committed, and its records are processed again, re-emitting
   identical bytes.
2. **changelog written**: the batch's run states, then its log marks, sent to the changelog
   (``RunTable.prepare_batch``) and acknowledged (``ChangelogWriter.flush``). A state that says
   "ended" implies its START and terminal event were acknowledged.
3. **state stored**: the same writes in each partition's store, with the changelog offset past them
   (``RunTable.store_batch``).
4. **offsets committed**: the contiguous processed prefix of each input partition
   (``InputTracker.committable``; an offset never goes backwards, asserted there).

A crash between any two steps leaves the input uncommitted past the last checkpoint: the records are
processed again, and the marks (``olstream.streams.log_marks``) skip what was stored already.

``exactly_once`` (``olstream.streams.runtime.transactions``):

1. **changelog written** into each input partition's open transaction, beside the events and error
   records its records produced;
2. **transactions committed**, each with its partition's input offset: events, error records, state
   and offset become visible together, or (aborted) not at all;
3. **state stored**, as above.

A crash before 2 leaves nothing visible to a read_committed reader, and nothing stored: the records
are processed again from the committed offset. A crash between 2 and 3 leaves the store behind its
changelog: the next start restores the tail.

**Membership** (``at_least_once`` only). A worker the group dropped (no heartbeat within the session
timeout: an event loop stalled while a broker fails over) learns it only at its next request to the
coordinator; until then it still holds its assignment and would process records the partition's
new owner processes too. Its commits are refused, but its events are not: an old START sent after
the new owner's terminal event leaves a run running in the receiver. So no record is processed
unless a commit of this worker's generation was accepted within ``confirm_within`` seconds (a third
of the session timeout) before it (``confirm_member``): each checkpoint's accepted commit counts,
and where none is recent enough the worker commits a partition's committed offset again. The broker
cannot have given the partitions away before a session timeout after an accepted commit, so a
record processed within a third of it belongs to a current member, unless the process paused in
between (a GC pause, CPU throttling, a VM migration): only a fencing token closes that, which is
what ``exactly_once``'s transactions are. Under ``exactly_once`` a dropped worker's sends are
fenced by the partition's next owner, so no record waits for a membership check.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from faust.types import TP

from olstream.shared.errors import DeliveryError
from olstream.streams.input_tracker import InputTracker
from olstream.streams.runtime.changelog import ChangelogWriter
from olstream.streams.runtime.exits import exit_on_failed_delivery
from olstream.streams.runtime.metrics import BATCH_SECONDS, MEMBERSHIP_REFUSED, RETAINED
from olstream.streams.runtime.run_table import RunTable
from olstream.streams.runtime.sender import Sender
from olstream.streams.runtime.transactions import PartitionTransactions, ProducerFenced

log = logging.getLogger(__name__)

Commit = Callable[[Mapping[TP, int]], Awaitable[bool]]
Fenced = Callable[[ProducerFenced], Awaitable[None]]


@dataclass(slots=True)
class Batch:
    """The records processed since the last checkpoint."""

    started: float = 0.0  # monotonic time of its first record
    size: int = 0
    last_offsets: dict[int, int] = field(default_factory=dict)  # input partition -> its last offset
    # input partition -> {log partition: the highest log offset of its records}
    log_offsets: dict[int, dict[int, int]] = field(default_factory=dict)

    def add(self, partition: int, offset: int) -> dict[int, int]:
        """Count the record at `offset` of input `partition`; the log offsets of that partition's records."""
        if not self.size:
            self.started = time.monotonic()
        self.size += 1
        self.last_offsets[partition] = offset  # records are taken in offset order
        log_offsets = self.log_offsets.get(partition)
        if log_offsets is None:
            log_offsets = self.log_offsets[partition] = {}
        return log_offsets


class TransactionalChangelog:
    """The changelog writes of a batch, into each input partition's transaction (exactly_once)."""

    def __init__(self, transactions: PartitionTransactions, topic: str) -> None:
        self.transactions = transactions
        self.topic = topic

    def send(self, partition: int, key: bytes, value: bytes | None) -> None:
        self.transactions.send_changelog(self.topic, partition, key, value)


class Checkpoint:
    """Runs a batch's checkpoint (module docstring): under at_least_once sends acknowledged,
    changelog written, state stored, offsets committed; under exactly_once changelog written,
    transactions committed with the offsets, state stored."""

    def __init__(
        self,
        input_topic: str,
        sender: Sender,
        table: RunTable,
        changelog: ChangelogWriter,
        commit: Commit,
        tracker: InputTracker,
        confirm_within: float,
        transactions: PartitionTransactions | None = None,
        on_fenced: Fenced | None = None,
    ) -> None:
        self.input_topic = input_topic
        self.sender = sender
        self.table = table
        self.changelog = changelog
        self.commit = commit
        self.tracker = tracker
        self.seconds = 0.0  # time spent in checkpoints
        self.confirm_within = confirm_within
        self.confirmed_at = -math.inf  # monotonic time a commit accepted by the group was sent
        self.transactions = transactions
        self.on_fenced = on_fenced
        if transactions is not None:
            self.transactional_changelog = TransactionalChangelog(transactions, changelog.topic)

    async def run(self, batch: Batch) -> None:
        """The batch's checkpoint (an empty batch commits what the tracker passed over)."""
        started = time.perf_counter()
        self.tracker.checkpoint_started()
        waited = 0.0
        try:
            waiting = time.monotonic()
            try:
                if self.transactions is None:
                    await self.run_at_least_once(batch)
                else:
                    await self.run_exactly_once(batch)
            except ProducerFenced as e:
                if self.on_fenced is None:
                    exit_on_failed_delivery(e)
                await self.on_fenced(e)
                return
            except DeliveryError as e:
                exit_on_failed_delivery(e)
            waited = time.monotonic() - waiting
            for partition, log_offsets in batch.log_offsets.items():
                self.table.committed_log.note_acked(partition, batch.last_offsets[partition], log_offsets)
        finally:
            self.tracker.checkpoint_ended(time.monotonic(), waited)
        elapsed = time.perf_counter() - started
        self.seconds += elapsed
        RETAINED.set(self.table.retention.retained)
        BATCH_SECONDS.set(elapsed)
        log.debug("batch of %d records checkpointed in %.3f s", batch.size, elapsed)

    async def run_at_least_once(self, batch: Batch) -> None:
        if batch.size:
            await self.sender.flush()
            writes = self.table.prepare_batch(self.changelog)
            self.table.store_batch(writes, await self.changelog.flush())
            for partition, offset in batch.last_offsets.items():
                self.tracker.stored(partition, offset)
        await self.commit_input()

    async def run_exactly_once(self, batch: Batch) -> None:
        transactions = self.transactions
        assert transactions is not None
        writes = self.table.prepare_batch(self.transactional_changelog) if batch.size else {}
        for partition, offset in batch.last_offsets.items():
            self.tracker.stored(partition, offset)  # in the transaction, which commits the offsets with it
        offsets = self.tracker.committable()
        sent = time.monotonic()
        next_changelog = await asyncio.get_running_loop().run_in_executor(None, transactions.commit, offsets)
        self.table.store_batch(writes, next_changelog)
        if offsets:
            self.confirmed_at = sent
            self.tracker.did_commit(offsets)

    async def commit_input(self) -> None:
        offsets = self.tracker.committable()
        if not offsets:
            return
        sent = time.monotonic()
        if await self.commit({TP(self.input_topic, p): offset for p, offset in offsets.items()}):
            self.confirmed_at = sent
            self.tracker.did_commit(offsets)
        else:
            log.info("input offsets %s not committed (a rebalance took the partitions)", offsets)

    def member_confirmed(self) -> bool:
        """Whether a commit was accepted within `confirm_within` seconds (`confirm_member` needs no
        commit); always under exactly_once, whose transactions fence a dropped worker's sends."""
        return self.transactions is not None or time.monotonic() - self.confirmed_at < self.confirm_within

    async def confirm_member(self, partition: int) -> bool:
        """Whether the group counts this worker as a member of the current generation: true when a
        commit was accepted within `confirm_within` seconds, else after committing `partition`'s
        committed offset again (called under the worker's lock, so never beside a checkpoint's commit:
        an offset never goes backwards). False: the commit was refused (a rebalance is on its way)."""
        if self.member_confirmed():
            return True
        offset = self.tracker.recommit_offset(partition)
        if offset is None:
            return False
        sent = time.monotonic()
        if not await self.commit({TP(self.input_topic, partition): offset}):
            MEMBERSHIP_REFUSED.inc()
            return False
        self.confirmed_at = sent
        self.tracker.did_commit({partition: offset})
        return True

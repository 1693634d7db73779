"""Step 3: the gate. A record goes on only while this worker owns its partition as a current member
of the group; the worker's lock, its membership and its fencing live here.

**The lock.** One of a record being processed, a checkpoint, a rebalance hook holds it: the steps
after the gate, the checkpoint included, run under it, and so do the chain's life-cycle calls
(``olstream.streams.runtime.chain``): `join`, `close` (a revocation: join, then forget the
assignment) and `poll`. The gate also takes a new assignment (`assign`): the worker's producer
started once, the group's stable committed offsets, the partitions' run states, then the ledgers.

**Ownership.** A record admitted before a rebalance began is dropped here when its partition's
ledger changed meanwhile (`InputOrder.standing`): its next owner reads it again from the commit.

**Membership** (``at_least_once`` only). A worker the group dropped (no heartbeat within the session
timeout: an event loop stalled while a broker fails over) learns it only at its next request to the
coordinator; until then it still holds its assignment and would process records the partition's
new owner processes too. Its commits are refused, but its events are not: an old START sent after
the new owner's terminal event leaves a run running in the receiver. So no record is processed
unless a commit of this worker's generation was accepted within ``confirm_within`` seconds (a third
of the session timeout) before it: each checkpoint's accepted commit counts, and
where none is recent enough the gate commits the partition's committed offset again. The broker
cannot have given the partitions away before a session timeout after an accepted commit, so a
record processed within a third of it belongs to a current member, unless the process paused in
between (a GC pause, CPU throttling, a VM migration): only a fencing token closes that, which is
what ``exactly_once``'s transactions are.

**Fencing** (``exactly_once``). A send or a checkpoint whose transaction can never commit returns the
fence up the chain to the gate, which drops the batch (`abandon`: the steps after it are closed):
nothing of it was committed. Fenced by the group's generation (the group dropped
this worker: another one may own its partitions now), the worker waits for the group's rebalance,
and leaves (`FENCED`) when none comes within `REJOIN_SECONDS`. Fenced by the producer's epoch (the
broker aborted a transaction open past its timeout), the producer is replaced and the worker reads
its partitions again from the committed offsets at once: no rebalance is coming.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from faust.types import TP

from olstream.streams.runtime.chain import ChainReport, Link, Step, Taken
from olstream.streams.runtime.exits import exit_on_failed_delivery, exit_on_unexpected
from olstream.streams.runtime.input_order import InputOrder, Standing
from olstream.streams.runtime.metrics import FENCES, MEMBERSHIP_REFUSED
from olstream.streams.runtime.run_table import RunTable
from olstream.streams.runtime.transaction_errors import Fenced, GenerationFenced
from olstream.streams.runtime.transactions import WorkerTransactions

log = logging.getLogger(__name__)

REJOIN_SECONDS = 120.0  # a refused or fenced worker waits this long for the rebalance, then the process ends

Commit = Callable[[Mapping[TP, int]], Awaitable[bool]]


class MemberGate(Link):
    """Holds the lock around the rest of the chain; lets a record on only while its partition is
    owned by a current member; opens its partition's state transaction; takes an assignment; drops
    the batch when the chain returns a fence."""

    def __init__(
        self,
        input_topic: str,
        order: InputOrder,
        table: RunTable,
        transactions: WorkerTransactions | None,
        commit: Commit,
        report: ChainReport,
        next_step: Step[Taken],
    ) -> None:
        self.input_topic = input_topic
        self.order = order
        self.table = table
        self.transactions = transactions
        self.commit = commit
        self.report = report
        self.next = next_step
        self.lock = asyncio.Lock()
        self.fenced_at: float | None = None  # when a fence dropped the batch, until the next assignment

    async def submit(self, item: Taken) -> None:
        partition = item.input.partition
        async with self.lock:
            standing = self.order.standing(partition, item.identity)
            if standing is Standing.GONE:
                return  # revoked while it waited: its next owner reads it again
            if standing is Standing.CONFIRMED or await self.confirm_member(partition):
                item.state = self.table.transaction(partition)
                started = time.perf_counter()
                fence = await self.next.submit(item)
                if fence is not None:
                    await self.drop_fenced(fence)
                self.report.processing_seconds += time.perf_counter() - started
                return
        await self.wait_until_revoked(partition, item.input.offset, item.identity)

    # ------------------------------------------------------------------ the chain's life cycle

    async def assign(self, partitions: list[int]) -> None:
        """Take a new assignment: the worker's producer (the first time only: it is kept across
        rebalances), the group's stable committed offsets (a previous owner's transaction holding
        them ended, committed or aborted, so the restore after it reads what that transaction wrote,
        or nothing of it), the partitions' run states (committed state only), then the ledgers."""
        self.fenced_at = None
        loop = asyncio.get_running_loop()
        try:
            if self.transactions is not None:
                await loop.run_in_executor(None, self.transactions.start)
            bases, never = await self.order.positions(partitions)
            await loop.run_in_executor(None, self.table.assign, partitions)
            self.order.take(bases, never)
        except Exception as e:  # the broker did not say where the group stands: nothing is safe to take
            exit_on_unexpected(f"taking input partitions {partitions} (producer, offsets, run states)", e)
        await self.next.assign(partitions)

    async def join(self) -> None:
        """Checkpoint the batch, under the lock."""
        async with self.lock:
            fence = await self.next.join()
            if fence is not None:
                await self.drop_fenced(fence)

    async def close(self) -> None:
        """A revocation: join (the batch is checkpointed before the partitions go, so nothing of a
        revoked partition is written afterwards), then forget the assignment, under the lock."""
        async with self.lock:
            fence = await self.next.join()
            if fence is not None:
                await self.drop_fenced(fence)
            self.order.revoked()
            self.table.forget_assignment()
            await self.next.close()

    async def poll(self) -> None:
        """Leave when fenced too long; the steps after the gate do their due work under the lock."""
        self.check_rejoined()
        async with self.lock:
            fence = await self.next.poll()
            if fence is not None:
                await self.drop_fenced(fence)

    # ------------------------------------------------------------------ membership

    async def confirm_member(self, partition: int) -> bool:
        """No commit was accepted within `confirm_within` seconds: whether the group still counts this
        worker as a member of the current generation, after committing `partition`'s committed offset
        again (under the lock, so never beside a checkpoint's commit: an offset never goes backwards).
        False: the commit was refused (a rebalance is on its way)."""
        offset = self.order.recommit_offset(partition)
        if offset is None:
            return False
        sent = time.monotonic()
        if not await self.commit({TP(self.input_topic, partition): offset}):
            MEMBERSHIP_REFUSED.inc()
            return False
        self.order.note_commit({partition: offset}, sent)
        return True

    async def wait_until_revoked(self, partition: int, offset: int, identity: int) -> None:
        """Hold the record at `offset` until the rebalance a refused commit announced revokes its
        partition; raises when none comes within `REJOIN_SECONDS`."""
        log.warning(
            "input partition %d: the group refused this worker's commit (it was dropped from the group, "
            "or the group is rebalancing): the record at offset %d waits for the rebalance, unprocessed",
            partition,
            offset,
        )
        deadline = time.monotonic() + REJOIN_SECONDS
        while self.order.owns(partition, identity):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"no rebalance within {REJOIN_SECONDS:.0f} s after the group refused a commit of "
                    f"input partition {partition}"
                )
            await asyncio.sleep(0.1)

    # ------------------------------------------------------------------ fencing

    async def drop_fenced(self, fence: Fenced) -> None:
        """`abandon` the batch; anything it raises ends the process (as a failed checkpoint does)."""
        try:
            await self.abandon(fence)
        except Exception as e:  # not caught to go on: the process ends here
            exit_on_unexpected("dropping a fenced batch", e)

    async def abandon(self, e: Fenced) -> None:
        """Fenced (exactly_once): the batch's transaction can never commit. Nothing of it was committed:
        drop it (the steps after the gate are closed), forget the assignment's ledgers and end the open
        transaction (the producer replaced when fenced for good). Fenced by the generation, records
        wait for the group's rebalance; fenced by the epoch, the partitions are read again from the
        committed offsets at once."""
        dropped = self.report.batched
        await self.next.close()
        log.warning(
            "%s; the batch of %d records is dropped (nothing of it was committed, its records are read "
            "again from the committed offsets)%s",
            e,
            dropped,
            " and the worker waits for the group's rebalance" if isinstance(e, GenerationFenced) else "",
        )
        FENCES.inc()
        self.table.discard_batch()
        owned = self.order.partitions()
        self.order.revoked()  # the synchronous part first: a checkpoint meanwhile finds nothing
        if self.transactions is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.transactions.recover)
        if isinstance(e, GenerationFenced):
            if self.fenced_at is None:
                self.fenced_at = time.monotonic()
        else:
            await self.order.read_again_from_commits(owned)

    def check_rejoined(self) -> None:
        """Leave (`FENCED`) when a fenced worker got no new assignment within `REJOIN_SECONDS`."""
        if self.fenced_at is not None and time.monotonic() - self.fenced_at > REJOIN_SECONDS:
            exit_on_failed_delivery(
                GenerationFenced(
                    f"fenced, and no rebalance gave this worker partitions in {REJOIN_SECONDS:.0f} s"
                )
            )

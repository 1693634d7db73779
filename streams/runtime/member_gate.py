"""Step 3: the gate. A record goes on only while this worker owns its partition as a current member
of the group; the worker's lock, its membership and its fencing live here.

**The lock.** One of a record being processed, a checkpoint, a rebalance hook holds it: the steps
after the gate, the checkpoint included, run under it.

**Ownership.** A record admitted before a rebalance began is dropped here when its partition's
ledger changed meanwhile (`InputTracker.owns`): its next owner reads it again from the commit.

**Membership** (``at_least_once`` only). A worker the group dropped (no heartbeat within the session
timeout: an event loop stalled while a broker fails over) learns it only at its next request to the
coordinator; until then it still holds its assignment and would process records the partition's
new owner processes too. Its commits are refused, but its events are not: an old START sent after
the new owner's terminal event leaves a run running in the receiver. So no record is processed
unless a commit of this worker's generation was accepted within ``confirm_within`` seconds (a third
of the session timeout) before it (`Membership`): each checkpoint's accepted commit counts, and
where none is recent enough the gate commits the partition's committed offset again. The broker
cannot have given the partitions away before a session timeout after an accepted commit, so a
record processed within a third of it belongs to a current member, unless the process paused in
between (a GC pause, CPU throttling, a VM migration): only a fencing token closes that, which is
what ``exactly_once``'s transactions are.

**Fencing** (``exactly_once``). A send or a checkpoint whose transaction can never commit drops the
batch (`abandon`): nothing of it was committed. Fenced by the group's generation (the group dropped
this worker: another one may own its partitions now), the worker waits for the group's rebalance,
and leaves (`FENCED`) when none comes within `REJOIN_SECONDS`. Fenced by the producer's epoch (the
broker aborted a transaction open past its timeout), the producer is replaced and the worker reads
its partitions again from the committed offsets at once: no rebalance is coming.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping

from faust.types import TP

from olstream.streams.input_tracker import InputTracker
from olstream.streams.runtime.chain import Step, Taken
from olstream.streams.runtime.exits import exit_on_failed_delivery
from olstream.streams.runtime.input_order import InputOrder
from olstream.streams.runtime.metrics import FENCES, MEMBERSHIP_REFUSED
from olstream.streams.runtime.run_table import RunTable
from olstream.streams.runtime.transaction_errors import Fenced, GenerationFenced
from olstream.streams.runtime.transactions import WorkerTransactions

log = logging.getLogger(__name__)

REJOIN_SECONDS = 120.0  # a refused or fenced worker waits this long for the rebalance, then the process ends

Commit = Callable[[Mapping[TP, int]], Awaitable[bool]]


class Membership:
    """When the group last accepted a commit of this worker (`confirmed_at`, set by each accepted
    commit), and whether that is recent enough to process a record (`confirmed`); always under
    exactly_once, whose transactions fence a dropped worker's sends."""

    def __init__(self, confirm_within: float, fenced_by_transactions: bool) -> None:
        self.confirm_within = confirm_within
        self.fenced_by_transactions = fenced_by_transactions
        self.confirmed_at = -math.inf  # monotonic time a commit the group accepted was sent

    def confirmed(self) -> bool:
        return self.fenced_by_transactions or time.monotonic() - self.confirmed_at < self.confirm_within


class MemberGate:
    """Holds the lock around the rest of the chain; lets a record on only while its partition is
    owned by a current member; opens its partition's state (and producer) transaction."""

    def __init__(
        self,
        input_topic: str,
        order: InputOrder,
        table: RunTable,
        transactions: WorkerTransactions | None,
        membership: Membership,
        commit: Commit,
        drop_batch: Callable[[], int],
        next_step: Step,
    ) -> None:
        self.input_topic = input_topic
        self.order = order
        self.tracker: InputTracker = order.tracker
        self.table = table
        self.transactions = transactions
        self.membership = membership
        self.commit = commit
        self.drop_batch = drop_batch  # drops the checkpoint step's batch (fenced); its size
        self.next = next_step
        self.lock = asyncio.Lock()
        self.fenced_at: float | None = None  # when a fence dropped the batch, until the next assignment
        self.busy_seconds = 0.0  # time in the steps after the gate (full batches' checkpoints included)

    async def submit(self, item: Taken) -> None:
        partition = item.partition
        async with self.lock:
            if not self.tracker.owns(partition, item.identity):
                return  # revoked while it waited: its next owner reads it again
            if self.membership.confirmed() or await self.confirm_member(partition):
                item.state = self.table.transaction(partition)
                started = time.perf_counter()
                try:
                    await self.next.submit(item)
                except Fenced as e:
                    await self.abandon(e)
                self.busy_seconds += time.perf_counter() - started
                return
        await self.wait_until_revoked(partition, item.offset, item.identity)

    async def confirm_member(self, partition: int) -> bool:
        """No commit was accepted within `confirm_within` seconds: whether the group still counts this
        worker as a member of the current generation, after committing `partition`'s committed offset
        again (under the lock, so never beside a checkpoint's commit: an offset never goes backwards).
        False: the commit was refused (a rebalance is on its way)."""
        offset = self.tracker.recommit_offset(partition)
        if offset is None:
            return False
        sent = time.monotonic()
        if not await self.commit({TP(self.input_topic, partition): offset}):
            MEMBERSHIP_REFUSED.inc()
            return False
        self.membership.confirmed_at = sent
        self.tracker.did_commit({partition: offset})
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
        while self.tracker.owns(partition, identity):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"no rebalance within {REJOIN_SECONDS:.0f} s after the group refused a commit of "
                    f"input partition {partition}"
                )
            await asyncio.sleep(0.1)

    async def abandon(self, e: Fenced) -> None:
        """Fenced (exactly_once): the batch's transaction can never commit. Nothing of it was committed:
        drop it, forget the assignment's ledgers and end the open transaction (the producer replaced
        when fenced for good). Fenced by the generation, records wait for the group's rebalance;
        fenced by the epoch, the partitions are read again from the committed offsets at once."""
        dropped = self.drop_batch()
        log.warning(
            "%s; the batch of %d records is dropped (nothing of it was committed, its records are read "
            "again from the committed offsets)%s",
            e,
            dropped,
            " and the worker waits for the group's rebalance" if isinstance(e, GenerationFenced) else "",
        )
        FENCES.inc()
        self.table.discard_batch()
        owned = self.tracker.partitions()
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

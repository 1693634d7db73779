"""The batch and its checkpoint: the one place the worker's input offsets are committed.

A batch is the records processed since the last checkpoint (``batch_size`` records, or
``batch_within`` seconds, or a rebalance). Its checkpoint runs four steps, in this order:

1. **sends acknowledged**: every event the batch sent (output and errors topics) was acknowledged by
   the broker (``Sender.flush``; ``acks=all``, idempotent). A failed send ends the process at once:
   nothing of the batch is stored or committed, and its records are processed again, re-emitting
   identical bytes.
2. **state written**: the batch's run states, then its log marks, into the table (RocksDB, and
   the changelog writer), each under the event that changed it (``RunTable.write_batch``). A
   state that says "ended" implies its START and terminal event were acknowledged.
3. **changelog flushed**: every changelog write of the batch acknowledged by the broker
   (``ChangelogWriter.flush``, which then records the store's persisted changelog offsets).
4. **offsets committed**: the contiguous processed prefix of each input partition
   (``InputTracker.committable``; an offset never goes backwards, asserted there).

A crash between any two steps leaves the input uncommitted past the last checkpoint: the records are
processed again, and the marks (``olstream.streams.log_marks``) skip what was stored already.

**Membership.** A worker the group dropped (no heartbeat within the session timeout: an event loop
stalled while a broker fails over) learns it only at its next request to the coordinator; until
then it still holds its assignment and would process records the partition's new owner processes
too. Its commits are refused, but its events are not: an old START sent after the new owner's
terminal event leaves a run running in the receiver. So no record is processed unless a commit of
this worker's generation was accepted within ``confirm_within`` seconds (a third of the session
timeout) before it (``confirm_member``): each checkpoint's accepted commit counts, and where none is
recent enough the worker commits a partition's committed offset again. The broker cannot have given
the partitions away before a session timeout after an accepted commit, so a record processed within
a third of it belongs to a current member. A refused commit means a rebalance is on its way: the
record waits for it and is read again by its next owner.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from faust.types import TP

from olstream.shared.errors import DeliveryError, ExitCode
from olstream.streams.input_tracker import InputTracker
from olstream.streams.runtime import app as m
from olstream.streams.runtime import faust_private
from olstream.streams.runtime.changelog import ChangelogWriter
from olstream.streams.runtime.run_table import RunTable
from olstream.streams.runtime.sender import Sender

log = logging.getLogger(__name__)

Commit = Callable[[Mapping[TP, int]], Awaitable[bool]]


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


class Checkpoint:
    """Runs a batch's checkpoint: sends acknowledged, state written, changelog flushed, offsets committed."""

    def __init__(
        self,
        input_topic: str,
        sender: Sender,
        table: RunTable,
        changelog: ChangelogWriter,
        commit: Commit,
        tracker: InputTracker,
        confirm_within: float,
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

    async def run(self, batch: Batch) -> None:
        """The batch's checkpoint (an empty batch commits what the tracker passed over)."""
        started = time.perf_counter()
        self.tracker.checkpoint_started()
        waited = 0.0
        try:
            if batch.size:
                waiting = time.monotonic()
                try:
                    await self.sender.flush()
                except DeliveryError as e:
                    log.critical(
                        "%s; exiting without storing or committing the batch (it is processed again)", e
                    )
                    os._exit(ExitCode.SEND_FAILED)
                waited = time.monotonic() - waiting
                token = faust_private.set_current_event(None)
                try:
                    self.table.write_batch()
                finally:
                    faust_private.reset_current_event(token)
                await self.changelog.flush()
                for partition, offset in batch.last_offsets.items():
                    self.tracker.stored(partition, offset)
            await self.commit_input()
            for partition, log_offsets in batch.log_offsets.items():
                self.table.committed_log.note_acked(partition, batch.last_offsets[partition], log_offsets)
        finally:
            self.tracker.checkpoint_ended(time.monotonic(), waited)
        elapsed = time.perf_counter() - started
        self.seconds += elapsed
        m.RETAINED.set(self.table.retention.retained)
        m.BATCH_SECONDS.set(elapsed)
        log.debug("batch of %d records checkpointed in %.3f s", batch.size, elapsed)

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
        commit)."""
        return time.monotonic() - self.confirmed_at < self.confirm_within

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
            m.MEMBERSHIP_REFUSED.inc()
            return False
        self.confirmed_at = sent
        self.tracker.did_commit({partition: offset})
        return True

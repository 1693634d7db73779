"""The worker's agent: one faust agent, its timers and its rebalance hooks, around a short chain.

A record's path is a chain of seven steps (``olstream.streams.runtime.chain``; docs/worker.md
draws it): faust's stream → `AdmitInOrder` → `ParentWait` → `MemberGate` → `JudgeMarks` →
`ApplyRecord` → `SendEvents` → `BatchCheckpoint`. `StreamWorker` builds it, last step first, each
step handed the next. The input topic is declared with ``acks=False``: faust never acks, gap-fills
or commits it; the checkpoint is the only commit.

Under exactly_once the worker has one transactional producer for its life, initialised before its
first assignment and kept across rebalances (``olstream.streams.runtime.transactions``). An
assignment reads the group's committed offsets as stable ones (after any previous owner's
transaction holding them ended), then restores the partitions' run states from the changelog
(read_committed); records of the new assignment wait for both.

A rebalance revokes every partition (faust's eager protocol): faust first suspends the stream, then
sends ``on_partitions_revoked``, and the worker joins and closes the chain there: under the gate's
lock the batch is checkpointed before the partitions go, so nothing of a revoked partition is
written afterwards, then the steps forget the assignment. That commit runs on faust's
consumer thread as faust's own commits during a revocation do: the thread serves its method queue
while it waits for the revocation hook (``tests/integration/streams/test_assignment.py`` shows it).

The agent never lets faust restart it past an unprocessed record: an unexpected exception ends the
process before anything after the last checkpoint is committed (``exit_on_unexpected``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import time
from typing import Any

from confluent_kafka import KafkaException

from olstream.contract import topics, wire
from olstream.shared.idle import behind, consumed_to_end
from olstream.streams.input_tracker import InputTracker
from olstream.streams.runtime import faust_private, metrics
from olstream.streams.runtime.app import StreamApp, drop_monitor_sensor
from olstream.streams.runtime.apply_record import ApplyRecord
from olstream.streams.runtime.chain import Taken
from olstream.streams.runtime.changelog import ChangelogWriter
from olstream.streams.runtime.checkpoint import Batch, BatchCheckpoint, Checkpoint
from olstream.streams.runtime.directory_reader import DirectoryReader, kept_directory
from olstream.streams.runtime.exits import exit_on_unexpected
from olstream.streams.runtime.group_member import GroupMember, check_metadata_format
from olstream.streams.runtime.input_offsets import InputOffsets
from olstream.streams.runtime.input_order import AdmitInOrder, InputOrder
from olstream.streams.runtime.mark_judge import JudgeMarks
from olstream.streams.runtime.member_gate import MemberGate, Membership
from olstream.streams.runtime.parent_wait import ParentWait
from olstream.streams.runtime.rejects import ErrorRecords, int_header
from olstream.streams.runtime.run_store import RunStore
from olstream.streams.runtime.run_table import RunTable
from olstream.streams.runtime.send_events import SendEvents
from olstream.streams.runtime.sender import EventSends, Sender
from olstream.streams.runtime.standby import standby_states
from olstream.streams.runtime.topology import changelog_topic, check_assignment
from olstream.streams.runtime.transactions import WorkerTransactions
from olstream.streams.runtime.worker_identity import claim

log = logging.getLogger(__name__)

COMMITTED_REFRESH_SECONDS = 2.0  # how often the group's committed offsets are read (gates evictions)


def _where(event: Any) -> str:
    msg = event.message
    headers = msg.headers
    return (
        f"processing the record at topic partition {msg.partition}, offset {msg.offset} (log partition "
        f"{int_header(headers, wire.HEADER_PARTITION)}, offset {int_header(headers, wire.HEADER_OFFSET)})"
    )


class StreamWorker:
    """The chain of one worker process (built last step first), its rebalance hooks and timers."""

    def __init__(self, sa: StreamApp, sender: Sender, input_offsets: InputOffsets) -> None:
        self.sa = sa
        self.settings = settings = sa.settings
        self.input_offsets = input_offsets
        self.tracker = InputTracker()
        self.input = InputOrder(self.tracker, input_offsets, lambda: sa.app.consumer, settings.input_topic)
        sized = topics.producer_size_config(settings.max_event_bytes)
        self.changelog = ChangelogWriter(settings.connection, changelog_topic(settings.app_id), sized)
        self.transactions = self.worker_transactions(sized) if settings.exactly_once else None
        # under exactly_once a record's events and error records go into the worker's transaction
        outputs: EventSends = sender if self.transactions is None else self.transactions
        self.store = RunStore(settings.connection, settings.data_dir, self.changelog.topic, settings.app_id)
        self.table = RunTable(settings, self.store, self.owned_input_tps)
        self.starts, self.directory = kept_directory(settings, sa.partitions)  # a restart reads the tail
        self.reader = DirectoryReader(
            settings.connection,
            settings.app_id,
            settings.input_topic,
            sa.partitions,
            self.directory,
            sa.framing,
        )
        self.stopping = False
        self.lag_partitions: set[int] = set()  # input partitions olstream_stream_input_lag reports
        self.build_chain(sender, outputs)

    def worker_transactions(self, sized: dict[str, Any]) -> WorkerTransactions:
        """exactly_once: the worker's transactional producer (its id kept in the data dir, which this
        process locks), sending the offsets with faust's member's own generation (KIP-447). Its
        transactions time out a second before the session timeout (at least twice the batch's age
        limit): a worker killed and not restarted holds read_committed readers of its output for at
        most that, plus the broker's abort check interval (10 s by default), plus the age of its
        transaction when it died (one batch)."""
        settings = self.settings
        check_metadata_format(settings.app_id, self.input_offsets.group_metadata())
        self.identity = claim(settings.data_dir)
        member = GroupMember(settings.app_id, lambda: faust_private.group_member(self.sa.app.consumer))
        return WorkerTransactions(
            settings.connection,
            self.identity.transactional_id(settings.app_id),
            settings.input_topic,
            member.metadata,
            transaction_timeout=max(settings.session_timeout - 1.0, 2 * settings.batch_within),
            extra=sized,
        )

    def build_chain(self, sender: Sender, outputs: EventSends) -> None:
        """The record path (chain.STEPS), last step first, each step handed the next."""
        settings = self.settings
        # commits input offsets through faust's consumer (at_least_once), which exists from the app's start
        commit = functools.partial(faust_private.commit_offsets, self.sa.app.consumer)
        self.membership = Membership(
            settings.session_timeout / 3, fenced_by_transactions=settings.exactly_once
        )
        self.checkpoint = Checkpoint(
            settings.input_topic,
            sender,
            self.table,
            changelog=self.changelog,
            commit=commit,
            tracker=self.tracker,
            membership=self.membership,
            transactions=self.transactions,
        )
        self.last = BatchCheckpoint(self.checkpoint, settings.batch_size)
        send = SendEvents(settings.output_topic, outputs, self.last)
        errors = ErrorRecords(settings, outputs)
        apply = ApplyRecord(settings.mapping, self.table, errors, send)
        self.gate = MemberGate(
            settings.input_topic,
            self.input,
            self.table,
            self.transactions,
            self.membership,
            commit,
            self.last.drop,
            JudgeMarks(apply),
        )
        self.checkpoint.on_fenced = self.gate.abandon
        wait = ParentWait(
            settings.mapping, settings.max_event_bytes, self.directory, self.reader, self.tracker, self.gate
        )
        self.head = AdmitInOrder(self.input, wait)

    def owned_input_tps(self) -> set[Any]:
        """The input topic's partitions currently assigned to this worker."""
        topic, owned = self.settings.input_topic, set()
        for tp in self.sa.app.consumer.assignment():
            if tp.topic == topic:
                owned.add(tp)
        return owned

    @property
    def batch(self) -> Batch:
        return self.last.batch

    async def run_checkpoint(self) -> None:
        """Checkpoint the batch, under the gate's lock."""
        async with self.gate.lock:
            await self.last.join()

    # ------------------------------------------------------------------ rebalances

    async def on_partitions_revoked(self) -> None:
        """Join the chain (checkpoint the batch before the partitions go; faust suspended the stream
        already), then close it: the steps forget the assignment."""
        async with self.gate.lock:
            await self.last.join()
            self.input.revoked()
            self.table.rescan_needed = True

    async def on_partitions_assigned(self) -> None:
        owned = sorted(tp.partition for tp in self.owned_input_tps())
        check_assignment(self.settings.input_topic, owned, self.sa.partitions)  # the input grew: leave
        loop = asyncio.get_running_loop()
        self.gate.fenced_at = None
        try:
            if self.transactions is not None:  # the first assignment only: it is kept across rebalances
                await loop.run_in_executor(None, self.transactions.start)
            # stable offsets first: a previous owner's transaction holding them ended (committed or
            # aborted), so the restore after it reads what that transaction wrote, or nothing of it
            bases, never = await self.input.positions(owned)
            await loop.run_in_executor(None, self.store.assign, owned)  # committed state only
            self.input.take(bases, never)
        except Exception as e:  # the broker did not say where the group stands: nothing is safe to take
            exit_on_unexpected(f"taking input partitions {owned} (producer, offsets, run states)", e)

    # ------------------------------------------------------------------ evictions

    async def refresh_committed(self) -> None:
        """Ask the broker which input offsets the group has committed (gates evictions), then the
        input's end offsets: the lag gauge."""
        owned = sorted(tp.partition for tp in self.owned_input_tps())
        for gone in self.lag_partitions - set(owned):  # revoked: its new owner reports it
            metrics.INPUT_LAG.remove(str(gone))
        self.lag_partitions &= set(owned)
        if not owned:
            return
        try:
            offsets = await self.input_offsets.committed(owned)
        except KafkaException as e:
            log.warning("could not read the group's committed offsets (evictions wait): %s", e)
            return
        for partition, offset in offsets.items():
            self.table.committed_log.note_committed(partition, offset)
        await self.refresh_input_lag(owned, offsets)

    async def refresh_input_lag(self, owned: list[int], committed: dict[int, int]) -> None:
        """`olstream_stream_input_lag`: each owned partition's end offset minus the group's commit (its
        low watermark when the group never committed it), as `olstream status` counts it."""
        try:
            bounds = await self.input_offsets.bounds(owned)
        except KafkaException as e:
            log.debug("could not read the input's end offsets for the lag gauge: %s", e)
            return
        if sorted(tp.partition for tp in self.owned_input_tps()) != owned:
            return  # a rebalance meanwhile: the next round reports the new assignment
        for partition, (low, high) in bounds.items():
            metrics.INPUT_LAG.labels(str(partition)).set(max(0, high - committed.get(partition, low)))
            self.lag_partitions.add(partition)

    # ------------------------------------------------------------------ --until-idle

    async def input_positions(
        self, partitions: list[int]
    ) -> tuple[dict[int, tuple[int, int]], dict[int, int]]:
        """The watermarks of `partitions` and the group's committed offsets on the broker; the commits
        are read first: a commit at or past an end offset read after it covers every record there was."""
        committed = await self.input_offsets.committed(partitions)
        bounds = await self.input_offsets.bounds(partitions)
        return bounds, committed

    def settled(self) -> bool:
        return not (self.stopping or self.sa.app.rebalancing or self.batch.size or self.tracker.rebalancing)

    async def check_idle(self) -> None:
        """Stop the worker (exit 0) once every assigned input partition is processed and committed.

        The truth is the group's committed offsets on the broker: a partition committed to its end is
        done, even when this process never took one of its records. A partition behind is done once
        this process took and stored every record of it (or the broker shows the rest empty: the
        markers of the last transaction) and the commit that follows reached the end. Nothing is
        decided during a rebalance, with records taken but not checkpointed, or when the assignment
        changed while the broker was asked.
        """
        tps = self.owned_input_tps()
        if not tps or not self.settled():
            return
        partitions = sorted(tp.partition for tp in tps)
        try:
            bounds, committed = await self.input_positions(partitions)
            late = behind(bounds, committed)
            if late:
                for partition in late:
                    if not await self.input.taken_to_end(partition, bounds[partition][1]):
                        return
                await self.run_checkpoint()
                bounds, committed = await self.input_positions(partitions)
                if not consumed_to_end(bounds, committed):
                    return
        except KafkaException as e:
            log.warning("--until-idle: could not read the input's offsets (asking again): %s", e)
            return
        if not self.settled() or self.owned_input_tps() != tps:
            return  # the assignment or the batch changed while the broker was asked: decide again
        self.stopping = True
        self.tracker.stopping = True
        log.info(
            "input consumed to its end, every send acknowledged and offsets committed: stopping "
            "(%.1f s processing records, %.1f s in checkpoints, %.1f s in garbage collections)",
            self.gate.busy_seconds - self.last.full_seconds,
            self.checkpoint.seconds,
            metrics.GC_TIMER.seconds,
        )
        os.kill(os.getpid(), signal.SIGTERM)

    def describe_input(self) -> str:
        return self.input.describe()


def attach(sa: StreamApp) -> StreamWorker:
    """Register the agent, the rebalance hooks and the timers on the app."""
    input_offsets = InputOffsets(sa.settings.connection, sa.settings.app_id, sa.settings.input_topic)
    sender = Sender(sa.settings.connection, topics.producer_size_config(sa.settings.max_event_bytes))
    worker = StreamWorker(sa, sender, input_offsets)
    worker.store.standby = standby_states(sa.settings, worker.changelog.topic, sa.partitions)
    app = sa.app
    faust_private.keep_no_read_offsets(app.consumer, sa.settings.input_topic)

    @app.agent(sa.input_topic, concurrency=1, name="olstream-stream-runs")
    async def process(stream: Any) -> None:
        drop_monitor_sensor(app)
        worker.reader.start()
        async for event in stream.events():
            msg = event.message
            if msg.partition >= sa.partitions:  # the input grew since the start: leave
                check_assignment(sa.settings.input_topic, [msg.partition], sa.partitions)
            try:
                await worker.head.submit(Taken(event, msg.partition, msg.offset))
            except Exception as e:  # not caught to go on: the process ends here
                exit_on_unexpected(_where(event), e)

    register_hooks(app, worker)
    register_timers(app, worker)
    return worker


def register_hooks(app: Any, worker: StreamWorker) -> None:
    """faust's rebalance signals: revoked (join and close the chain), assigned, complete."""

    async def on_revoked(sender: Any, *args: Any, **kwargs: Any) -> None:
        await worker.on_partitions_revoked()

    async def on_assigned(sender: Any, *args: Any, **kwargs: Any) -> None:
        await worker.on_partitions_assigned()

    async def on_rebalance(sender: Any, **kwargs: Any) -> None:
        owned = sorted(tp.partition for tp in worker.owned_input_tps())
        log.info("rebalance complete: input partitions %s", owned)
        check_assignment(worker.settings.input_topic, owned, worker.sa.partitions)

    app.on_partitions_revoked.connect(on_revoked)
    app.on_partitions_assigned.connect(on_assigned)
    app.on_rebalance_complete.connect(on_rebalance)


def register_timers(app: Any, worker: StreamWorker) -> None:
    """The worker's timers: a quiet batch's checkpoint, the committed offsets, rereads, tails, idle."""
    settings = worker.settings

    async def flush_quiet_batch() -> None:
        # a batch younger than batch_within waits for more records; an older one is checkpointed
        batch = worker.batch
        if batch.size and time.monotonic() - batch.started >= settings.batch_within:
            await worker.run_checkpoint()

    # checked 5 times per age limit: a quiet batch waits at most 1.2 times --batch-seconds, the
    # bound of the lineage topic's freshness under exactly_once (docs/benchmarks.md#freshness)
    app.timer(settings.batch_within / 5)(flush_quiet_batch)

    async def committed_timer() -> None:
        worker.gate.check_rejoined()
        await worker.refresh_committed()

    app.timer(COMMITTED_REFRESH_SECONDS)(committed_timer)

    async def reread_timer() -> None:
        await worker.input.retry_rereads()

    app.timer(1.0)(reread_timer)

    async def tail_timer() -> None:  # its own timer: the broker's answers may take seconds
        await worker.input.catch_up_tails()

    app.timer(1.0)(tail_timer)

    if settings.until_idle:

        async def idle_timer() -> None:
            await worker.check_idle()

        app.timer(settings.idle_check_interval)(idle_timer)

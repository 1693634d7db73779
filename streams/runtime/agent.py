"""The worker's agent: one faust agent, its timers and its rebalance hooks, around a short chain.

A record's path (docs/worker.md draws it): faust's stream → ``InputOrder.admit_at_once`` (strict
offset order, ``admit`` / ``hole_found`` where it must wait; holes and tails are
``olstream.streams.input_tracker``'s) → ``RecordStep.handle`` (judge,
decode, apply, send) → the ``Batch`` → ``Checkpoint.run`` (made durable in Kafka: sends and
changelog acknowledged and offsets committed, or under exactly_once one transaction per input
partition; then stored). The input topic is declared with ``acks=False``: faust never acks,
gap-fills or commits it; the checkpoint is the only commit.

An assignment first initialises the partitions' transactional producers (exactly_once: that fences
their previous owner), then restores their run states from the changelog (read_committed), then
reads the group's committed offsets; records of the new assignment wait for all three.

A rebalance revokes every partition (faust's eager protocol): faust first suspends the stream, then
sends ``on_partitions_revoked``, and the worker runs the batch's checkpoint there, before the
partitions go, so nothing of a revoked partition is written afterwards. That commit runs on faust's
consumer thread as faust's own commits during a revocation do: the thread serves its method queue
while it waits for the revocation hook (``tests/integration/streams/test_assignment.py`` shows it).

The agent never lets faust restart it past an unprocessed record: an unexpected exception ends the
process before anything after the last checkpoint is committed (``exit_on_unexpected``).
"""

from __future__ import annotations

import asyncio
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
from olstream.streams.runtime.changelog import ChangelogWriter
from olstream.streams.runtime.checkpoint import Batch, Checkpoint
from olstream.streams.runtime.directory_reader import DirectoryReader, kept_directory
from olstream.streams.runtime.exits import exit_on_failed_delivery, exit_on_unexpected
from olstream.streams.runtime.input_offsets import InputOffsets
from olstream.streams.runtime.input_order import HOLE, NOT_ASSIGNED, InputOrder
from olstream.streams.runtime.record_step import RecordStep, WaitedChild
from olstream.streams.runtime.rejects import ErrorRecords, int_header
from olstream.streams.runtime.run_store import RunStore
from olstream.streams.runtime.run_table import RunTable
from olstream.streams.runtime.sender import EventSends, Sender
from olstream.streams.runtime.standby import standby_states
from olstream.streams.runtime.topology import changelog_topic, check_assignment
from olstream.streams.runtime.transactions import PartitionTransactions, ProducerFenced
from olstream.streams.runtime.turn_lock import TurnLock

log = logging.getLogger(__name__)

REJOIN_SECONDS = 120.0  # a refused or fenced worker waits this long for the rebalance, then the process ends
COMMITTED_REFRESH_SECONDS = 2.0  # how often the group's committed offsets are read (gates evictions)


def _where(event: Any) -> str:
    msg = event.message
    headers = msg.headers
    return (
        f"processing the record at topic partition {msg.partition}, offset {msg.offset} (log partition "
        f"{int_header(headers, wire.HEADER_PARTITION)}, offset {int_header(headers, wire.HEADER_OFFSET)})"
    )


class StreamWorker:
    """The chain of one worker process, and the batch it is filling."""

    def __init__(self, sa: StreamApp, sender: Sender, input_offsets: InputOffsets) -> None:
        self.sa = sa
        self.settings = settings = sa.settings
        self.input_offsets = input_offsets
        self.tracker = InputTracker()
        self.input = InputOrder(self.tracker, input_offsets, lambda: sa.app.consumer, settings.input_topic)
        sized = topics.producer_size_config(settings.max_event_bytes)
        changelog = changelog_topic(settings.app_id)
        self.changelog = ChangelogWriter(settings.connection, changelog, sized)
        self.transactions = (
            PartitionTransactions(
                settings.connection,
                settings.app_id,
                settings.input_topic,
                input_offsets.group_metadata,
                sized,
            )
            if settings.exactly_once
            else None
        )
        # under exactly_once a record's events and error records go into its partition's transaction
        outputs: EventSends = sender if self.transactions is None else self.transactions
        self.store = RunStore(settings.connection, settings.data_dir, changelog, settings.app_id)
        self.table = RunTable(settings, self.store, self.owned_input_tps)
        self.starts, self.directory = kept_directory(settings, sa.partitions)  # a restart reads the tail
        self.reader = DirectoryReader(
            settings.connection, settings.app_id, settings.input_topic, sa.partitions, self.directory
        )
        self.step = RecordStep(settings, self.table, ErrorRecords(settings, outputs), outputs, self.directory)
        self.checkpoint = Checkpoint(
            settings.input_topic,
            sender,
            self.table,
            changelog=self.changelog,
            commit=lambda offsets: faust_private.commit_offsets(sa.app.consumer, offsets),
            tracker=self.tracker,
            confirm_within=settings.session_timeout / 3,
            transactions=self.transactions,
            on_fenced=self.abandon,
        )
        self.fenced_at: float | None = None  # when a fence dropped the batch, until the next assignment
        self.batch = Batch()
        self.lock = TurnLock()  # one of: a record being processed, a checkpoint, a rebalance hook
        self.stopping = False
        self.busy_seconds = 0.0  # time spent processing records (judge, decode, apply, send)
        self.lag_partitions: set[int] = set()  # input partitions olstream_stream_input_lag reports

    def owned_input_tps(self) -> set[Any]:
        """The input topic's partitions currently assigned to this worker."""
        topic = self.settings.input_topic
        return {tp for tp in self.sa.app.consumer.assignment() if tp.topic == topic}

    # ------------------------------------------------------------------ processing

    def add(self, event: Any, child: WaitedChild | None = None) -> None:
        """Process one taken record: state into the batch's overlay, events into the producer (or the
        partition's transaction)."""
        if self.table.rescan_needed:
            self.table.rescan()
        msg = event.message
        partition = msg.partition
        log_offsets = self.batch.add(partition, msg.offset)
        self.table.partition = partition  # table reads go to the record's partition's store
        if self.transactions is not None:
            self.transactions.select(partition)
        t = time.perf_counter()
        self.step.handle(event, log_offsets, child)
        self.busy_seconds += time.perf_counter() - t

    async def abandon(self, e: ProducerFenced) -> None:
        """Fenced (exactly_once): another worker took one of the input partitions, so the group dropped
        this one (a pause past the session timeout, a broker failing over). Nothing of the batch was
        committed: drop it, forget the assignment (records wait for the next one) and abort the open
        transactions; the rebalance that gives this worker partitions again follows. Without one in
        `REJOIN_SECONDS` the process leaves (`FENCED`)."""
        log.warning(
            "%s; the batch of %d records is dropped (nothing of it was committed, its records are read "
            "again from the committed offsets) and the worker waits for the group's rebalance",
            e,
            self.batch.size,
        )
        metrics.FENCES.inc()
        self.batch = Batch()
        self.table.discard_batch()
        self.input.revoked()  # the synchronous part first: a checkpoint meanwhile finds nothing
        if self.fenced_at is None:
            self.fenced_at = time.monotonic()
        if self.transactions is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.transactions.abort_open)

    def check_rejoined(self) -> None:
        """Leave (`FENCED`) when a fenced worker got no new assignment within `REJOIN_SECONDS`."""
        if self.fenced_at is not None and time.monotonic() - self.fenced_at > REJOIN_SECONDS:
            exit_on_failed_delivery(
                ProducerFenced(
                    f"fenced, and no rebalance gave this worker partitions in {REJOIN_SECONDS:.0f} s"
                )
            )

    async def wait_for_parents(self, event: Any, child: WaitedChild) -> None:
        """Wait until the run directory can resolve this child's parent (`RecordStep.waited_child`).

        Called before the record takes the lock: checkpoints and rebalances go on meanwhile, and the
        directory's progress depends on the records topic only (`DirectoryReader`). Every such child's
        wait is observed, a zero one too: the START delay the directory adds.
        """
        started = time.monotonic()
        need = self.step.pending(child)
        if need is not None:
            metrics.CHILDREN_WAITING.inc()
            self.tracker.wait_started()  # the records behind it are held, not dropped
            try:
                while need is not None:
                    await self.reader.wait_covered(need)
                    need = self.step.pending(child)
            finally:
                metrics.CHILDREN_WAITING.dec()
                self.tracker.wait_ended(time.monotonic())
            child_s = event.message.timestamp
            if isinstance(child_s, (int, float)) and child_s > 0:
                behind = (self.reader.newest_ms - child_s * 1000) / 1000
                metrics.PARENT_WAIT_RECORD_SECONDS.observe(max(0.0, behind))
        metrics.PARENT_WAIT_SECONDS.observe(time.monotonic() - started)

    async def wait_until_revoked(self, partition: int, offset: int, identity: int) -> None:
        """Hold the record at `offset` until the rebalance a refused commit announced revokes its
        partition (`Checkpoint.confirm_member`); raises when none comes within `REJOIN_SECONDS`."""
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

    async def run_checkpoint(self) -> None:
        """Checkpoint the batch (under the lock); any exception ends the process (`exit_on_unexpected`)."""
        async with self.lock:
            await self.checkpoint_locked()

    async def checkpoint_locked(self) -> None:
        batch, self.batch = self.batch, Batch()
        try:
            await self.checkpoint.run(batch)
        except Exception as e:  # not caught to go on: the process ends here
            exit_on_unexpected("checkpointing a batch", e)

    # ------------------------------------------------------------------ rebalances

    async def on_partitions_revoked(self) -> None:
        """Checkpoint the batch before the partitions go (faust suspended the stream already); forget
        the ledgers."""
        async with self.lock:
            await self.checkpoint_locked()
            self.input.revoked()
            self.table.rescan_needed = True
            if self.transactions is not None:
                self.transactions.close()

    async def on_partitions_assigned(self) -> None:
        owned = sorted(tp.partition for tp in self.owned_input_tps())
        check_assignment(self.settings.input_topic, owned, self.sa.partitions)  # the input grew: leave
        loop = asyncio.get_running_loop()
        self.fenced_at = None
        try:
            if self.transactions is not None:  # fences the previous owners: nothing of theirs lands after
                await loop.run_in_executor(None, self.transactions.assign, owned)
            await loop.run_in_executor(None, self.store.assign, owned)  # committed state only
            await self.input.assign(owned)  # the committed offsets, read after the fence
        except Exception as e:  # the broker did not say where the group stands: nothing is safe to take
            exit_on_unexpected(f"taking input partitions {owned} (producers, run states, offsets)", e)

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
            self.busy_seconds,
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
    batch_size = sa.settings.batch_size

    @app.agent(sa.input_topic, concurrency=1, name="olstream-stream-runs")
    async def process(stream: Any) -> None:
        drop_monitor_sensor(app)
        worker.reader.start()
        async for event in stream.events():
            msg = event.message
            if msg.partition >= sa.partitions:  # the input grew since the start: leave
                check_assignment(sa.settings.input_topic, [msg.partition], sa.partitions)
            try:
                partition = msg.partition
                taken = worker.input.admit_at_once(partition, msg.offset)
                if taken == NOT_ASSIGNED:
                    taken = await worker.input.admit(partition, msg.offset)
                elif taken == HOLE:
                    taken = await worker.input.hole_found(partition, msg.offset)
                if taken is None:
                    continue
                child = worker.step.waited_child(event)
                if child is not None:
                    await worker.wait_for_parents(event, child)
                if worker.lock.free() and worker.checkpoint.member_confirmed():
                    # nothing below awaits, and nothing holds or waits for the lock: taking it would
                    # change nothing (no checkpoint or rebalance hook can run meanwhile)
                    member = True
                    if worker.tracker.owns(partition, taken):
                        worker.add(event, child)
                else:
                    async with worker.lock:
                        if not worker.tracker.owns(partition, taken):
                            continue  # revoked while it waited for the lock: its next owner reads it again
                        member = await worker.checkpoint.confirm_member(partition)
                        if member:
                            worker.add(event, child)
                if not member:  # the group dropped this worker: its next owner reads the record again
                    await worker.wait_until_revoked(partition, msg.offset, taken)
                    continue
            except ProducerFenced as e:  # the group dropped this worker: drop the batch, wait to rejoin
                await worker.abandon(e)
                continue
            except Exception as e:  # not caught to go on: the process ends here
                exit_on_unexpected(_where(event), e)
            if worker.batch.size >= batch_size:
                await worker.run_checkpoint()

    async def flush_quiet_batch() -> None:
        # a batch younger than batch_within waits for more records; an older one is checkpointed
        batch = worker.batch
        if batch.size and time.monotonic() - batch.started >= sa.settings.batch_within:
            await worker.run_checkpoint()

    # checked 5 times per age limit: a quiet batch waits at most 1.2 times --batch-seconds, the
    # bound of the lineage topic's freshness under exactly_once (docs/benchmarks.md#freshness)
    app.timer(sa.settings.batch_within / 5)(flush_quiet_batch)

    async def on_revoked(sender: Any, *args: Any, **kwargs: Any) -> None:
        await worker.on_partitions_revoked()

    async def on_assigned(sender: Any, *args: Any, **kwargs: Any) -> None:
        await worker.on_partitions_assigned()

    async def on_rebalance(sender: Any, **kwargs: Any) -> None:
        owned = sorted(tp.partition for tp in worker.owned_input_tps())
        log.info("rebalance complete: input partitions %s", owned)
        check_assignment(sa.settings.input_topic, owned, sa.partitions)

    app.on_partitions_revoked.connect(on_revoked)  # type: ignore[arg-type]
    app.on_partitions_assigned.connect(on_assigned)  # type: ignore[arg-type]
    app.on_rebalance_complete.connect(on_rebalance)  # type: ignore[arg-type]

    async def committed_timer() -> None:
        worker.check_rejoined()
        await worker.refresh_committed()

    app.timer(COMMITTED_REFRESH_SECONDS)(committed_timer)

    async def reread_timer() -> None:
        await worker.input.retry_rereads()

    app.timer(1.0)(reread_timer)

    async def tail_timer() -> None:  # its own timer: the broker's answers may take seconds
        await worker.input.catch_up_tails()

    app.timer(1.0)(tail_timer)

    if sa.settings.until_idle:

        async def idle_timer() -> None:
            await worker.check_idle()

        app.timer(sa.settings.idle_check_interval)(idle_timer)

    return worker

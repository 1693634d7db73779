"""The worker's agent: one faust agent, its timers and its rebalance hooks, around the chain.

A record's path is a chain of seven steps (``olstream.streams.runtime.chain``; docs/worker.md
draws it): faust's stream → `AdmitInOrder` → `ParentWait` → `MemberGate` → `JudgeMarks` →
`ApplyRecord` → `SendEvents` → `BatchCheckpoint`, built with the worker's other parts by
``olstream.streams.runtime.worker_parts``. `StreamWorker` hands each record to the first step and
makes the chain's life-cycle calls on it (`assign`, `join`, `close`, `poll`); it calls no other
step and sets nothing of any part. The input topic is declared with ``acks=False``: faust never
acks, gap-fills or commits it; the checkpoint is the only commit.

A rebalance revokes every partition (faust's eager protocol): faust first suspends the stream, then
sends ``on_partitions_revoked``, and the worker closes the chain there: under the gate's lock the
batch is checkpointed before the partitions go, so nothing of a revoked partition is written
afterwards, then the steps forget the assignment. That commit runs on faust's consumer thread as
faust's own commits during a revocation do: the thread serves its method queue while it waits for
the revocation hook (``tests/integration/streams/test_assignment.py`` shows it). The assignment
hook hands the new partitions to the chain (`assign`): records of the new assignment wait until the
gate read the group's stable committed offsets and restored the partitions' run states.

The agent never lets faust restart it past an unprocessed record: an unexpected exception ends the
process before anything after the last checkpoint is committed (``exit_on_unexpected``).
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

from confluent_kafka import KafkaException

from olstream.shared.idle import behind, consumed_to_end
from olstream.streams.input_record import InputRecord
from olstream.streams.runtime import faust_private, metrics
from olstream.streams.runtime.app import StreamApp, drop_monitor_sensor
from olstream.streams.runtime.exits import exit_on_unexpected
from olstream.streams.runtime.topology import check_assignment
from olstream.streams.runtime.worker_parts import WorkerParts, build_worker_parts, owned_input_tps

log = logging.getLogger(__name__)

COMMITTED_REFRESH_SECONDS = 2.0  # how often the group's committed offsets are read (gates evictions)


class StreamWorker:
    """One worker process: its parts (the chain's first step among them), its rebalance hooks and
    timers."""

    def __init__(self, sa: StreamApp, parts: WorkerParts) -> None:
        self.sa = sa
        self.settings = sa.settings
        self.parts = parts
        self.head = parts.head
        self.order = parts.order
        self.stopping = False
        self.lag_partitions: set[int] = set()  # input partitions olstream_stream_input_lag reports

    def owned_input_tps(self) -> set[Any]:
        """The input topic's partitions currently assigned to this worker."""
        return owned_input_tps(self.sa)

    # ------------------------------------------------------------------ rebalances

    async def on_partitions_revoked(self) -> None:
        """Close the chain: the batch is checkpointed before the partitions go (faust suspended the
        stream already), then the steps forget the assignment."""
        await self.head.close()

    async def on_partitions_assigned(self) -> None:
        owned = sorted(tp.partition for tp in self.owned_input_tps())
        check_assignment(self.settings.input_topic, owned, self.sa.partitions)  # the input grew: leave
        await self.head.assign(owned)

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
            offsets = await self.parts.input_offsets.committed(owned)
        except KafkaException as e:
            log.warning("could not read the group's committed offsets (evictions wait): %s", e)
            return
        for partition, offset in offsets.items():
            self.parts.table.committed_log.note_committed(partition, offset)
        await self.refresh_input_lag(owned, offsets)

    async def refresh_input_lag(self, owned: list[int], committed: dict[int, int]) -> None:
        """`olstream_stream_input_lag`: each owned partition's end offset minus the group's commit (its
        low watermark when the group never committed it), as `olstream status` counts it."""
        try:
            bounds = await self.parts.input_offsets.bounds(owned)
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
        committed = await self.parts.input_offsets.committed(partitions)
        bounds = await self.parts.input_offsets.bounds(partitions)
        return bounds, committed

    def settled(self) -> bool:
        batched = self.parts.report.batched
        return not (self.stopping or self.sa.app.rebalancing or batched or self.order.rebalancing())

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
                    if not await self.order.taken_to_end(partition, bounds[partition][1]):
                        return
                await self.head.join()
                bounds, committed = await self.input_positions(partitions)
                if not consumed_to_end(bounds, committed):
                    return
        except KafkaException as e:
            log.warning("--until-idle: could not read the input's offsets (asking again): %s", e)
            return
        if not self.settled() or self.owned_input_tps() != tps:
            return  # the assignment or the batch changed while the broker was asked: decide again
        self.stopping = True
        self.order.stop()
        report = self.parts.report
        log.info(
            "input consumed to its end, every send acknowledged and offsets committed: stopping "
            "(%.1f s processing records, %.1f s in checkpoints, %.1f s in garbage collections)",
            report.processing_seconds - report.full_batch_seconds,
            report.checkpoint_seconds,
            metrics.GC_TIMER.seconds,
        )
        os.kill(os.getpid(), signal.SIGTERM)

    def describe_input(self) -> str:
        return self.order.describe()


def attach(sa: StreamApp) -> StreamWorker:
    """Build the worker's parts; register the agent, the rebalance hooks and the timers on the app."""
    worker = StreamWorker(sa, build_worker_parts(sa))
    app = sa.app
    faust_private.keep_no_read_offsets(app.consumer, sa.settings.input_topic)

    @app.agent(sa.input_topic, concurrency=1, name="olstream-stream-runs")
    async def process(stream: Any) -> None:
        drop_monitor_sensor(app)
        worker.parts.reader.start()
        head = worker.head
        async for event in stream.events():
            msg = event.message
            if msg.partition >= sa.partitions:  # the input grew since the start: leave
                check_assignment(sa.settings.input_topic, [msg.partition], sa.partitions)
            record = None
            try:
                record = InputRecord.of(event)
                await head.submit(record)
            except Exception as e:  # not caught to go on: the process ends here
                where = f"reading the record at topic partition {msg.partition}, offset {msg.offset}"
                exit_on_unexpected(where if record is None else record.where(), e)

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
    """The worker's timers: the chain's poll, the committed offsets, the input's tails, idle."""
    settings = worker.settings

    async def poll_timer() -> None:
        # the chain's due work: a quiet batch's checkpoint (one older than batch_within), reads again
        # that brought nothing, a fenced worker's deadline to rejoin
        await worker.head.poll()

    # 5 times per age limit: a quiet batch waits at most 1.2 times --batch-seconds, the bound of the
    # lineage topic's freshness under exactly_once (docs/benchmarks.md#freshness)
    app.timer(settings.batch_within / 5)(poll_timer)

    async def committed_timer() -> None:
        await worker.refresh_committed()

    app.timer(COMMITTED_REFRESH_SECONDS)(committed_timer)

    async def tail_timer() -> None:  # its own timer: the broker's answers may take seconds
        await worker.order.catch_up_tails()

    app.timer(1.0)(tail_timer)

    if settings.until_idle:

        async def idle_timer() -> None:
            await worker.check_idle()

        app.timer(settings.idle_check_interval)(idle_timer)

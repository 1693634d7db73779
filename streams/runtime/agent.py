"""The thin faust agent: decode, apply the pure step, store state, send events, evict.

Events are processed as they arrive and acked manually, per batch (``batch_size``
records, or ``batch_within`` seconds): a batch's events are acked only after every
output send of the batch was acknowledged by the broker (``Sender.flush``), so a
committed offset never runs ahead of an unacknowledged event. A failed send ends the process at
once: nothing of the batch is committed, and the records are processed again,
re-emitting identical bytes. State writes of a batch are coalesced per run and
written to the table (RocksDB + changelog) after the batch's sends were acked, and
its log partitions' marks after them: a record at or below its log partition's
mark was applied before, and is skipped (``olstream.streams.log_marks``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from typing import Any, NoReturn

from confluent_kafka import KafkaException

from olstream.contract import codec, topics, wire
from olstream.contract.naming import MAX_JOB_PATH_BYTES
from olstream.contract.records import Record, RunEnded
from olstream.shared.errors import DecodeError, DeliveryError, ExitCode
from olstream.streams.log_marks import MarkBook, Verdict
from olstream.streams.processor import apply
from olstream.streams.retention import CommittedLogPositions, Retention
from olstream.streams.runid import epoch_millis
from olstream.streams.runtime import app as m
from olstream.streams.runtime import faust_private
from olstream.streams.runtime.input_order import InputOrder
from olstream.streams.runtime.rejects import ErrorRecords, int_header
from olstream.streams.runtime.sender import Headers, Sender
from olstream.streams.runtime.table_state import TableState
from olstream.streams.runtime.topology import check_assignment
from olstream.streams.state import RunState, StreamInputError

log = logging.getLogger(__name__)

EX_SEND_FAILED = ExitCode.SEND_FAILED  # leave at once: nothing of the batch is committed
EX_FAILED = ExitCode.FAILED  # an unexpected exception: leave at once, before anything past it is committed
COMMITTED_REFRESH_SECONDS = 2.0  # how often the group's committed offsets are read (gates evictions)
SLOW_FLUSH_SECONDS = 1.0  # a batch's sends waited this long: records queued meanwhile were held back


def exit_on_unexpected(what: str, error: Exception) -> NoReturn:
    """Stop the process now: faust would restart a crashed agent and commit past the record.

    Exceptions the project raises on purpose for bad input are routed to the errors topic before
    they get here; anything else is a bug or a broken dependency, and the only safe answer is to
    leave before the record's offset (or its batch's) can be committed: it is processed again.
    """
    if type(error).__name__ == "PartitionsMismatch":  # faust's, at a table write: the input grew
        log.critical(
            "%s: %s; the input topic gained partitions since this worker started: it leaves without "
            "acking the batch (exit %d); restart it, and the start grows the state changelog to match",
            what,
            error,
            int(ExitCode.INPUT_GREW),
        )
        os._exit(ExitCode.INPUT_GREW)
    log.critical(
        "%s: unexpected %s: %s; exiting without acking the batch (nothing past the last commit is "
        "committed; the records are processed again)",
        what,
        type(error).__name__,
        error,
        exc_info=error,
    )
    os._exit(EX_FAILED)


def _where(event: Any) -> str:
    msg = event.message
    headers = msg.headers
    return (
        f"processing the record at topic partition {msg.partition}, offset {msg.offset} (log partition "
        f"{int_header(headers, wire.HEADER_PARTITION)}, offset {int_header(headers, wire.HEADER_OFFSET)})"
    )


class StreamWorker(InputOrder, ErrorRecords, TableState):
    """Per-process processing state around the faust app (retention index, batch overlay, log marks,
    idle tracking)."""

    def __init__(self, sa: m.StreamApp, sender: Sender, input_offsets: m.InputOffsets) -> None:
        self.sa = sa
        self.input_offsets = input_offsets
        self.settings = sa.settings
        self.cfg = sa.settings.mapping
        self.table = sa.table
        self.store: Any = sa.table.data
        self.sender = sender
        self.retention = Retention(sa.settings.retention_ms)
        self.committed_log = CommittedLogPositions()
        self.rescan_needed = True
        self.parent_warned = False
        self.path_warned = False
        self.stopping = False
        # the batch's state changes: state key -> (state, or None when deleted; the event that wrote it)
        self.overlay: dict[str, tuple[RunState | None, Any]] = {}
        # decoded states of the store (bounded LRU), cleared on every rebalance
        self.cache: OrderedDict[str, RunState] = OrderedDict()
        # per (input partition, log partition): the highest log offset applied (olstream.streams.log_marks)
        self.marks: MarkBook[Any] = MarkBook()
        self.duplicates_logged = False
        self.batch: list[Any] = []
        # input partition -> {log partition: last log offset} of the batch's records
        self.batch_positions: dict[int, dict[int, int]] = {}
        self.batch_started = 0.0
        self.lock = asyncio.Lock()
        self.stream: Any = None
        self.busy_seconds = 0.0  # time spent processing records (mapping, state, sends)
        self.flush_seconds = 0.0  # time spent waiting for acks and writing state
        self.slow_flush_ended_at = 0.0  # monotonic time a batch whose sends waited SLOW_FLUSH_SECONDS ended

    # ------------------------------------------------------------------ processing

    def add(self, event: Any) -> None:
        """Process one event now (state into the overlay, events into the producer); ack it later."""
        if self.rescan_needed:
            self.rescan()
        if not self.batch:
            self.batch_started = time.monotonic()
        faust_private.set_current_event(event)  # table reads and writes go to the event's partition
        t = time.perf_counter()
        self.handle_event(event)
        self.busy_seconds += time.perf_counter() - t
        self.batch.append(event)

    async def flush_batch(self, stream: Any) -> None:
        """Wait for the batch's sends, then store its state, then ack its events (in that order).

        Any exception other than a failed send ends the process too (`exit_on_unexpected`).
        """
        try:
            await self._flush_batch(stream)
        except Exception as e:  # not caught to go on: the process ends here
            exit_on_unexpected("flushing a batch", e)

    async def _flush_batch(self, stream: Any) -> None:
        async with self.lock:
            if not self.batch:
                return
            started = time.perf_counter()
            events, self.batch = self.batch, []
            positions, self.batch_positions = self.batch_positions, {}
            # outputs first, state after: a state that says "ended" (in RocksDB or the changelog)
            # implies its START and terminal event were acknowledged, so a replayed RunStarted of
            # an ended run may skip its START and a run's last event is always its terminal one
            waiting = time.monotonic()
            try:
                await self.sender.flush()
            except DeliveryError as e:
                log.critical("%s; exiting without acking the batch (it will be processed again)", e)
                os._exit(EX_SEND_FAILED)
            acked = time.monotonic()
            if acked - waiting >= SLOW_FLUSH_SECONDS:
                self.slow_flush_ended_at = acked  # the queue was held back (catch_up_tails)
            token = faust_private.set_current_event(None)
            try:
                self.write_overlay()
            finally:
                self.overlay.clear()
                self.marks.take_batch()
                faust_private.reset_current_event(token)
            last_input: dict[int, int] = {}  # input partition -> the batch's last offset
            with self.sa.app.consumer.agent_acks():  # type: ignore[attr-defined]
                for event in events:
                    await stream.ack(event)
                    msg = event.message
                    if msg.offset > last_input.get(msg.partition, -1):
                        last_input[msg.partition] = msg.offset
            for input_partition, log_offsets in positions.items():
                self.committed_log.note_acked(input_partition, last_input[input_partition], log_offsets)
            m.RETAINED.set(self.retention.retained)
            elapsed = time.perf_counter() - started
            self.flush_seconds += elapsed
            m.BATCH_SECONDS.set(elapsed)
            log.debug("batch of %d records flushed in %.3f s", len(events), elapsed)

    def handle_event(self, event: Any) -> None:
        """Process one record, unless its log partition's mark says it was applied before."""
        msg = event.message
        headers = msg.headers
        log_partition = int_header(headers, wire.HEADER_PARTITION)
        log_offset = int_header(headers, wire.HEADER_OFFSET)
        if log_partition is None or log_offset is None:  # no position in its headers: no mark to judge by
            self.handle_record(event, log_partition, log_offset)
            return
        if self.judge_mark(msg.partition, log_partition, log_offset) is Verdict.DUPLICATE:
            return
        self.handle_record(event, log_partition, log_offset)
        # applied, a replay, or refused to the errors topic: it has had its effect
        self.marks.applied(msg.partition, log_partition, log_offset, event)

    def handle_record(self, event: Any, log_partition: int | None, log_offset: int | None) -> None:
        msg = event.message
        try:
            record = codec.decode(event.value, log_partition, log_offset)
        except DecodeError as e:  # undecodable, or invalid_time (naming the field)
            self.reject(event, e.error_reason, str(e))
            return
        m.record_counter(type(record).__name__).inc()
        log_offsets = self.batch_positions.get(msg.partition)
        if log_offsets is None:
            log_offsets = self.batch_positions[msg.partition] = {}
        if record.offset > log_offsets.get(record.partition, -1):
            log_offsets[record.partition] = record.offset
        self.evict(record.partition, epoch_millis(record.append_time), event)
        try:
            step = apply(record, self.cfg, self.lookup, msg.partition)
        except StreamInputError as e:
            self.reject(event, e.reason, str(e))
            return
        if self.too_large(event, record, step):
            return
        if step.write is not None:
            self.put(step.key, step.write, event)
            if isinstance(record, RunEnded) and step.write.end is not None:
                self.retention.note_finished(record.partition, step.write.end.end_ms, record.offset, step.key)
        if step.replay:
            m.REPLAYS.inc()
        if step.parent_not_visible:
            self.note_parent_not_visible(record)
        if step.job_path_too_long:
            m.JOB_PATH_TOO_LONG.inc()
        if step.job_path_too_long and not self.path_warned:
            self.path_warned = True
            log.warning(
                "run %s (log partition %d, offset %d): its job path would exceed %d bytes; named by a new "
                "path of its own, without a parent edge (job_path_too_long_total counts them; logged once "
                "per worker)",
                record.engine_run_id,
                record.partition,
                record.offset,
                MAX_JOB_PATH_BYTES,
            )
        for out in step.outputs:
            headers: Headers = [(wire.HEADER_RUN_ID, out.run_id.encode("ascii"))]
            self.sender.send(self.settings.output_topic, out.key, out.value, headers)
            m.event_counter(out.event_type).inc()

    async def refresh_committed(self, offsets_of: m.InputOffsets) -> None:
        """Ask the broker which input offsets the group has committed (the only safe truth)."""
        owned = sorted(tp.partition for tp in self.owned_input_tps())
        if not owned:
            return
        try:
            offsets = await offsets_of.committed(owned)
        except KafkaException as e:
            log.warning("could not read the group's committed offsets (evictions wait): %s", e)
            return
        for partition, offset in offsets.items():
            self.committed_log.note_committed(partition, offset)

    def note_parent_not_visible(self, record: Record) -> None:
        m.PARENT_NOT_VISIBLE.inc()
        if not self.parent_warned:
            self.parent_warned = True
            log.warning(
                "run %s (log partition %d, offset %d): its parent's identity or job path is neither on its "
                "record nor in this worker's state: emitted without a parent edge, named as a root "
                "(parent_not_visible_total counts them; logged once per worker)",
                record.engine_run_id,
                record.partition,
                record.offset,
            )


def attach(sa: m.StreamApp) -> StreamWorker:
    """Register the agent, the rebalance hook and the idle timer on the app."""
    input_offsets = m.InputOffsets(sa.settings.connection, sa.settings.app_id, sa.settings.input_topic)
    sender = Sender(sa.settings.connection, topics.producer_size_config(sa.settings.max_event_bytes))
    worker = StreamWorker(sa, sender, input_offsets)
    app = sa.app

    @app.agent(sa.input_topic, concurrency=1, name="olstream-stream-runs")
    async def process(stream: Any) -> None:
        # acks are manual: an event is acked only after its batch's sends were acknowledged
        stream.enable_acks = False
        worker.stream = stream
        async for event in stream.events():
            if event.message.partition >= sa.partitions:  # the input grew since the start: leave
                check_assignment(sa.settings.input_topic, [event.message.partition], sa.partitions)
            try:
                if not await worker.admit(event):
                    continue
                async with worker.lock:
                    token = faust_private.set_current_event(None)
                    try:
                        worker.add(event)
                    finally:
                        faust_private.reset_current_event(token)
            except Exception as e:  # not caught to go on: the process ends here
                exit_on_unexpected(_where(event), e)
            if len(worker.batch) >= sa.settings.batch_size:
                await worker.flush_batch(stream)

    async def flush_quiet_batch() -> None:
        # a batch younger than batch_within waits for more records; an older one is flushed
        quiet = time.monotonic() - worker.batch_started >= sa.settings.batch_within
        if worker.stream is not None and worker.batch and quiet:
            await worker.flush_batch(worker.stream)

    app.timer(sa.settings.batch_within / 2)(flush_quiet_batch)

    async def on_rebalance(sender: Any, **kwargs: Any) -> None:
        worker.rescan_needed = True
        owned = sorted(tp.partition for tp in worker.owned_input_tps())
        log.info("rebalance complete: input partitions %s", owned)
        check_assignment(sa.settings.input_topic, owned, sa.partitions)

    async def committed_timer() -> None:
        await worker.refresh_committed(input_offsets)

    app.timer(COMMITTED_REFRESH_SECONDS)(committed_timer)

    async def reread_timer() -> None:
        await worker.retry_rereads()

    app.timer(1.0)(reread_timer)

    async def tail_timer() -> None:  # its own timer: the broker's answers may take seconds
        await worker.catch_up_tails()

    app.timer(1.0)(tail_timer)

    app.on_rebalance_complete.connect(on_rebalance)  # type: ignore[arg-type]

    if sa.settings.until_idle:

        async def idle_timer() -> None:
            await worker.check_idle(input_offsets.bounds)

        app.timer(sa.settings.idle_check_interval)(idle_timer)

    return worker

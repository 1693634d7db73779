"""The thin faust agent: decode, apply the pure step, store state, send events, evict.

Batches come from ``stream.take_events``: faust acks a batch's events only after
this code returns, and this code returns only after every output send of the
batch was acknowledged by the broker, so a committed offset never runs ahead of
an unacknowledged event. A failed send ends the process at once (nothing of the
batch is committed; the records are processed again, re-emitting identical bytes).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
import weakref
from collections.abc import Iterable
from typing import Any

from faust.streams import _current_event as _CURRENT_EVENT

from connectors.eventlog import codec
from connectors.eventlog.records import Record, RunEnded
from olstream.errors import DecodeError
from streams import app as m
from streams.processor import apply
from streams.retention import Retention
from streams.runid import epoch_millis
from streams.state import RunState, StreamInputError, dumps_state, finished_end_ms, loads_state

log = logging.getLogger(__name__)

EX_SEND_FAILED = 75


def _header(headers: Any, name: str) -> bytes | None:
    items: Iterable[tuple[str, bytes]] = headers.items() if isinstance(headers, dict) else (headers or ())
    for k, v in items:
        if k == name:
            return v
    return None


def _int_header(headers: Any, name: str) -> int | None:
    raw = _header(headers, name)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


class StreamWorker:
    """Per-process processing state around the faust app (retention index, idle tracking)."""

    def __init__(self, sa: m.StreamApp) -> None:
        self.sa = sa
        self.settings = sa.settings
        self.cfg = sa.settings.mapping
        self.table = sa.table
        self.retention = Retention(sa.settings.retention_ms)
        self.rescan_needed = True
        self.parent_warned = False
        self.processed: dict[int, int] = {}  # input partition -> next offset, after its sends were acked
        self.stopping = False

    # ------------------------------------------------------------------ state access

    def lookup(self, engine_run_id: str) -> RunState | None:
        raw = self.table.get(engine_run_id.encode("utf-8"))
        return None if raw is None else loads_state(raw)

    def rescan(self) -> None:
        """Rebuild the retention index from the finished runs in the (restored) table."""
        self.retention.clear()
        count = 0
        for _key, raw in self.table.items():
            if raw is not None and finished_end_ms(raw) is not None:
                s = loads_state(raw)
                assert s.end is not None
                self.retention.note_finished(s.start_position[0], s.end.end_ms, s.engine_run_id)
                count += 1
        self.rescan_needed = False
        RETAINED_SET(self.retention.retained)
        log.info("retention index rebuilt: %d finished runs retained", count)

    def evict(self, log_partition: int, record_ms: int) -> None:
        for rid in self.retention.advance(log_partition, record_ms):
            key = rid.encode("utf-8")
            raw = self.table.get(key)
            if raw is not None and finished_end_ms(raw) is not None:
                del self.table[key]
                m.EVICTED.inc()

    # ------------------------------------------------------------------ processing

    async def handle_batch(self, stream: Any, events: list[Any]) -> None:
        started = time.perf_counter()
        if self.rescan_needed:
            self.rescan()
        pending: list[Any] = []
        token = _CURRENT_EVENT.set(None)
        try:
            for event in events:
                # the task-local current event routes table reads/writes to the event's partition
                # (store DB and changelog partition); only this task's context is touched, never
                # the stream's attribute that take_events' buffer task reads
                _CURRENT_EVENT.set(weakref.ref(event))
                await self.handle_event(event, pending)
        finally:
            _CURRENT_EVENT.reset(token)
        if pending:
            try:
                await asyncio.gather(*pending)
            except Exception as e:  # any failed send: never let the batch be acked
                log.critical("an output send failed (%s); exiting without committing the batch", e)
                os._exit(EX_SEND_FAILED)
        for event in events:
            msg = event.message
            self.processed[msg.partition] = max(self.processed.get(msg.partition, 0), msg.offset + 1)
        RETAINED_SET(self.retention.retained)
        m.BATCH_SECONDS.set(time.perf_counter() - started)

    async def handle_event(self, event: Any, pending: list[Any]) -> None:
        msg = event.message
        value: bytes = event.value
        headers = msg.headers
        log_partition = _int_header(headers, "olstream.partition")
        log_offset = _int_header(headers, "olstream.offset")
        try:
            record = codec.decode(value, log_partition, log_offset)
        except DecodeError as e:
            await self.reject(event, "undecodable", str(e), pending)
            return
        m.RECORDS.labels(type(record).__name__).inc()
        self.evict(record.partition, epoch_millis(record.append_time))
        try:
            step = apply(record, self.cfg, self.lookup, msg.partition)
        except StreamInputError as e:
            await self.reject(event, e.reason, str(e), pending)
            return
        if step.write is not None:
            self.table[step.engine_run_id.encode("utf-8")] = dumps_state(step.write)
            if isinstance(record, RunEnded) and step.write.end is not None:
                self.retention.note_finished(record.partition, step.write.end.end_ms, step.engine_run_id)
        if step.replay:
            m.REPLAYS.inc()
        if step.parent_not_visible:
            self.note_parent_not_visible(record)
        for out in step.outputs:
            fut = await self.sa.output_topic.send(key=out.key, value=out.value)
            pending.append(fut)
            m.EVENTS.labels(out.event_type).inc()

    def note_parent_not_visible(self, record: Record) -> None:
        m.PARENT_NOT_VISIBLE.inc()
        if not self.parent_warned:
            self.parent_warned = True
            log.warning(
                "run %s (log partition %d, offset %d) names only its parent's engine run id and that parent "
                "is not in this worker's state: emitted without a parent edge (counted in "
                "olstream_stream_parent_not_visible_total; logged once per worker)",
                record.engine_run_id,
                record.partition,
                record.offset,
            )

    async def reject(self, event: Any, reason: str, detail: str, pending: list[Any]) -> None:
        msg = event.message
        m.ERRORS.labels(reason).inc()
        log.warning("bad input at topic partition %d, offset %d: %s", msg.partition, msg.offset, detail)
        headers = [
            ("olstream.error", reason.encode()),
            ("olstream.error.detail", detail.encode("utf-8")),
            ("olstream.source.topic", msg.topic.encode()),
            ("olstream.source.partition", str(msg.partition).encode()),
            ("olstream.source.offset", str(msg.offset).encode()),
        ]
        for name in ("olstream.partition", "olstream.offset", "olstream.type", "olstream.fingerprint"):
            raw = _header(msg.headers, name)
            if raw is not None:
                headers.append((name, raw))
        fut = await self.sa.errors_topic.send(key=msg.key, value=event.value, headers=headers)
        pending.append(fut)

    # ------------------------------------------------------------------ --until-idle

    async def check_idle(self) -> None:
        """Stop the worker (exit 0) once every assigned input partition is processed, acked and committed."""
        if self.stopping:
            return
        app = self.sa.app
        consumer = app.consumer
        tps = [tp for tp in consumer.assignment() if tp.topic == self.settings.input_topic]
        if not tps or app.rebalancing:
            return
        highs = await consumer.highwaters(*tps)
        earliest = await consumer.earliest_offsets(*tps)
        for tp in tps:
            high, low = highs.get(tp), earliest.get(tp)
            if high is None:
                return
            if high > (low or 0) and self.processed.get(tp.partition, 0) < high:
                return
        await consumer.commit()
        for tp in tps:
            high, low = highs[tp], earliest.get(tp) or 0
            committed = consumer._committed_offset.get(tp)
            if high > low and (committed is None or committed < high):
                return
        self.stopping = True
        log.info("input consumed to its end, every send acknowledged and offsets committed: stopping")
        os.kill(os.getpid(), signal.SIGTERM)


def RETAINED_SET(value: int) -> None:
    m.RETAINED.set(value)


def attach(sa: m.StreamApp) -> StreamWorker:
    """Register the agent, the rebalance hook and the idle timer on the app."""
    worker = StreamWorker(sa)
    app = sa.app

    @app.agent(sa.input_topic, concurrency=1, name="olstream-stream-runs")
    async def process(stream: Any) -> None:
        async for events in stream.take_events(sa.settings.batch_size, within=sa.settings.batch_within):
            await worker.handle_batch(stream, list(events))

    @app.on_rebalance_complete.connect
    async def on_rebalance(sender: Any, **kwargs: Any) -> None:
        worker.rescan_needed = True

    if sa.settings.until_idle:

        @app.timer(sa.settings.idle_check_interval)
        async def idle_timer() -> None:
            await worker.check_idle()

    return worker

"""The sink's consumer loop: Kafka -> receiver, at-least-once, per-run order, bounded concurrency.

One asyncio loop owns the sink's state (commit trackers, epochs, queues, pauses, lag, repeats):
`concurrency` worker coroutines send events through the transport, and offsets are committed
manually (`enable.auto.commit=false`) over each partition's contiguous prefix of finished events.
No Kafka call that may wait on a broker runs on the loop: polling (`consume`), commits, watermark
and committed-offset queries and closing run on the Kafka thread of `kafka_calls`, awaited one at a
time by the consuming coroutine, so a slow broker never stops the sends. Rebalance callbacks run
inside `consume` and `close`, on that thread: each hands its part in the state to the loop
(`KafkaCalls.on_loop`), which is free (the consuming coroutine only awaits the call), and waits for
it. A revocation takes the revoked partitions' finished prefix and forgets them on the loop, then
commits that prefix on the Kafka thread before returning, so before the partitions move; the sends
go on meanwhile, and an answer for a revoked partition is stale. The lag gauge (`LagGauge`) and the
repeats of job versions (`Repeats`) are collaborators handed in, each with its own state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from olstream.connectors.sink.commits import (
    commit_offsets,
    consumed_to_end_of,
    finished_offsets,
    mark_committed,
)
from olstream.connectors.sink.delivery import (
    Backoff,
    ContiguousCommitTracker,
    DeliveryResult,
    KeyedQueues,
    Outcome,
    PendingEvent,
    Retries,
    pass_undelivered,
    run_of,
)
from olstream.connectors.sink.failures import dead_letter, log_failure
from olstream.connectors.sink.job_versions import terminal_of_message
from olstream.connectors.sink.kafka_calls import KafkaCalls, flush
from olstream.connectors.sink.lag import LagGauge
from olstream.connectors.sink.metrics import (
    BACKOFF_SECONDS,
    CIRCUIT_OPEN,
    DELIVERED,
    IN_FLIGHT,
    REPEATED,
    RETRIED,
)
from olstream.connectors.sink.pauses import Pauses
from olstream.connectors.sink.repeats import Repeats
from olstream.connectors.sink.settings import SinkSettings
from olstream.connectors.sink.transports import HttpTransport, SinkTransport, send
from olstream.contract import wire
from olstream.shared import deadletter
from olstream.shared.errors import InfrastructureError
from olstream.shared.metrics import set_health
from olstream.shared.stopping import install_stop_deadline

log = logging.getLogger(__name__)

TP = tuple[str, int]
CONSUME_BATCH = 500
COMMIT_EVERY = 2000  # finished events; commits also happen every commit interval


class Sink:
    def __init__(
        self,
        settings: SinkSettings,
        transport: SinkTransport,
        consumer: Consumer,
        dlq: Producer | None,
        lag: LagGauge | None = None,
        repeats: Repeats | None = None,
    ) -> None:
        self.settings = settings
        self.transport = transport
        self.consumer = consumer
        self.dlq = dlq
        self.backoff = Backoff(settings.backoff_initial, settings.backoff_max)  # the receiver's circuit
        self.retries = Retries(
            self.backoff, settings.retry_timeout, settings.backoff_initial, settings.backoff_max
        )
        self.batch_size = max(1, settings.batch_size) if isinstance(transport, HttpTransport) else 1
        self.lag = lag if lag is not None else LagGauge(consumer)
        self.repeats = repeats if repeats is not None else Repeats.for_transport(transport)
        self.calls = KafkaCalls()
        self.trackers: dict[TP, ContiguousCommitTracker] = {}
        self.epochs: dict[TP, int] = {}
        self.queues = KeyedQueues()
        self.ready: asyncio.Queue[PendingEvent] = asyncio.Queue()
        self.buffered = 0
        self.in_flight = 0
        self.pauses = Pauses(consumer, settings.max_buffered)
        self.finished_since_commit = 0
        self.commit_metadata: dict[TP, str] = {}  # per partition, stored with each commit (a replay's range)
        self.assigned_once = False
        self.stopping = asyncio.Event()
        self._epoch = 0
        self._last_idle_check = 0.0

    # -- rebalance: the callbacks run where the consumer is polled, the Kafka thread ---------------
    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.calls.on_loop(self._assigned, partitions)

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The revoked partitions' finished prefix is committed before they move: taken, and the
        partitions forgotten, on the loop; the commit waits for the broker here, on the thread that
        polls the consumer (the Kafka thread), while the loop goes on."""
        revoked = {(p.topic, p.partition) for p in partitions}
        positions = self.consumer.position(list(partitions))  # local (no broker), on the polling thread
        offsets = self.calls.on_loop(self._revoked, revoked, positions)
        if offsets:
            self.calls.on_loop(self._committed, offsets, self._commit(offsets))
        log.info("revoked %s", sorted(f"{t}[{p}]" for t, p in revoked))

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        lost = {(p.topic, p.partition) for p in partitions}
        self.calls.on_loop(self._forget, lost)  # never commit for partitions no longer owned
        log.warning("lost %s; their in-flight events will be redelivered by the new owner", sorted(lost))

    def _assigned(self, partitions: list[TopicPartition]) -> None:
        """On the loop: new bookkeeping for each assigned partition."""
        for p in partitions:
            tp = (p.topic, p.partition)
            self._epoch += 1
            self.epochs[tp] = self._epoch
            self.trackers[tp] = ContiguousCommitTracker()
            self.pauses.assigned(tp)
        self.lag.forget((p.topic, p.partition) for p in partitions)
        self.assigned_once = True
        log.info("assigned %s", sorted(f"{t}[{p}]" for t, p in ((q.topic, q.partition) for q in partitions)))

    def _revoked(self, revoked: set[TP], positions: list[TopicPartition]) -> list[TopicPartition]:
        """On the loop, at once: what to commit of the revoked partitions, then they are forgotten, so
        an answer that comes while the commit waits is stale, as it was while the callback ran."""
        offsets = self._finished_offsets(revoked, positions)
        self._forget(revoked)
        return offsets

    def _forget(self, partitions: set[TP]) -> None:
        for tp in partitions:
            tracker = self.trackers.pop(tp, None)
            if tracker is not None:
                self.buffered -= tracker.outstanding
            self.epochs.pop(tp, None)
            self.pauses.forget(tp)
        self.lag.forget(partitions)
        self.queues.drop_partitions(partitions)
        self.retries.drop_partitions(partitions)
        self.repeats.latest.forget(partitions)

    def _stale(self, event: PendingEvent) -> bool:
        return self.epochs.get((event.topic, event.partition)) != event.epoch

    # -- consuming -------------------------------------------------------------------------
    def _admit(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.fatal():
                raise InfrastructureError(f"Kafka consumer failed: {error.str()}")
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error: %s", error.str())
            return
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if topic is None or partition is None or offset is None:
            return
        tp = (topic, partition)
        epoch, tracker = self.epochs.get(tp), self.trackers.get(tp)
        if epoch is None or tracker is None:
            return  # a partition we no longer own
        value = message.value() or b""
        headers = message.headers()
        run = run_of(wire.header_value(headers, wire.HEADER_RUN_ID), value)
        redrive = tuple(
            (name, raw) for name in deadletter.REDRIVE_HEADERS if (raw := wire.header_value(headers, name))
        )
        event = PendingEvent(topic, partition, offset, message.key(), value, epoch, run,
                             terminal_of_message(run, headers, value), redrive=redrive)  # fmt: skip
        tracker.add(offset)
        self.lag.started(tp, offset)
        self.buffered += 1
        first = self.queues.add(event)
        if first is not None:
            self.ready.put_nowait(first)

    def _apply_pause(self) -> None:
        self.pauses.apply(self.epochs, self.backoff.active, self.buffered)

    # -- sending ---------------------------------------------------------------------------
    async def _worker(self) -> None:
        while True:
            batch = [await self.ready.get()]
            while len(batch) < self.batch_size and not self.ready.empty():
                batch.append(self.ready.get_nowait())  # heads of distinct keys only
            while self.backoff.active and not self.stopping.is_set():
                BACKOFF_SECONDS.set(self.backoff.last_delay)
                await asyncio.sleep(min(self.backoff.remaining(), 1.0))
            if self.stopping.is_set():
                self._keep_repeats(batch)  # posted at the stop; the rest stays uncommitted
                return  # unsent events stay uncommitted and are delivered after a restart
            batch = self._sendable(batch)
            if not batch:
                continue
            BACKOFF_SECONDS.set(0)
            generation = self.backoff.generation
            self.in_flight += len(batch)
            IN_FLIGHT.inc(len(batch))
            for event in batch:
                self.repeats.latest.sending(event)
            try:
                results = await self._send(batch)
            finally:
                self.in_flight -= len(batch)
                IN_FLIGHT.dec(len(batch))
            settled = sorted(
                zip(batch, results, strict=True), key=lambda p: p[1].outcome is not Outcome.DELIVERED
            )
            for event, result in settled:  # deliveries first: they reset the backoff, failures then set it
                repeat = self.repeats.after_settling(event, result.outcome is Outcome.DELIVERED, self._stale)
                self._settle(event, result, generation)
                if repeat is not None:
                    self.ready.put_nowait(repeat)
            CIRCUIT_OPEN.set(1 if self.backoff.attempt else 0)  # opened by failures, closed by a delivery

    async def _send(self, batch: list[PendingEvent]) -> list[DeliveryResult]:
        return await send(self.transport, batch)

    def _settle(self, event: PendingEvent, result: DeliveryResult, generation: int) -> None:
        if self._stale(event):
            self.repeats.settled(event)
            return  # revoked meanwhile: the new owner delivers it again
        if event.repeat and result.outcome in (Outcome.REJECTED, Outcome.MISCONFIGURED):
            return self._give_up_repeat(event, f"HTTP {result.status}")
        if result.outcome is Outcome.DELIVERED:
            (REPEATED if event.repeat else DELIVERED).inc()
            if self.backoff.attempt:
                log.info("receiver accepts events again (%s)", self.settings.destination)
                self.pauses.receiver_back()
                set_health(True)
            self.retries.delivered(event.ident)
            if event.repeat:
                self.repeats.settled(event)
                return
            self._finish(event)
        elif result.outcome is Outcome.REJECTED and self.dlq is not None:
            self.retries.forget(event.ident)
            self._dead_letter(event, result, deadletter.REJECTED)
        else:
            RETRIED.inc()
            escalates = generation == self.backoff.generation
            wait, receiver_wide = self.retries.failed(event.ident, result, generation)
            if result.outcome is Outcome.RETRY and event.repeat and self.retries.expired(event.ident):
                return self._give_up_repeat(event, "retry timeout")
            if result.outcome is Outcome.RETRY and self.dlq is not None and self.retries.expired(event.ident):
                self.retries.forget(event.ident)
                self._dead_letter(event, result, deadletter.RETRIES_EXHAUSTED)
                return
            if escalates or not receiver_wide:
                self._log_failure(event, result, wait)
            if receiver_wide:
                self.ready.put_nowait(event)  # every sender waits for the circuit first
            else:
                # only this event (and its run's later events, queued behind it) waits
                asyncio.get_running_loop().call_later(wait, self._retry, event)

    def _retry(self, event: PendingEvent) -> None:
        if not self._stale(event):
            self.ready.put_nowait(event)
        else:
            self.repeats.settled(event)

    def _log_failure(self, event: PendingEvent, result: DeliveryResult, wait: float) -> None:
        log_failure(self.settings.destination, event, result, wait)

    def _finish(self, event: PendingEvent) -> None:
        tracker = self.trackers.get((event.topic, event.partition))
        if tracker is None or self._stale(event):
            return
        tracker.finish(event.offset)
        self.buffered -= 1
        self.finished_since_commit += 1
        successor = self.queues.finish(event)
        if successor is not None:
            self.ready.put_nowait(successor)

    def _dead_letter(
        self, event: PendingEvent, result: DeliveryResult, reason: str = deadletter.REJECTED
    ) -> None:
        assert self.dlq is not None
        dead_letter(
            self.dlq, self.settings.dlq_topic, event, result, reason, self._finish, self.ready.put_nowait
        )

    # -- repeats (`Repeats`, over this sink's queue and ownership) ------------------------
    def _sendable(self, batch: list[PendingEvent]) -> list[PendingEvent]:
        return self.repeats.sendable(batch, self._stale)

    def _give_up_repeat(self, event: PendingEvent, why: str) -> None:
        self.retries.forget(event.ident)
        self.repeats.give_up(event, why)

    def _keep_repeats(self, batch: list[PendingEvent]) -> None:
        """A worker that stops puts back the repeats it took, for `_flush_repeats`."""
        for event in self.repeats.kept(batch):
            self.ready.put_nowait(event)

    async def _flush_repeats(self, deadline: float) -> None:
        waiting = [self.ready.get_nowait() for _ in range(self.ready.qsize())]
        await self.repeats.flush(waiting, self._stale, self.transport, deadline)

    # -- committing ------------------------------------------------------------------------
    def commit_finished(self, only: set[TP] | None = None) -> bool:
        """Commit each owned partition's finished prefix (of `only`, when given), waiting for the
        broker on this thread. The loop commits with `_commit_off_loop`, a revocation in `on_revoke`."""
        offsets = self._finished_offsets(only)
        return not offsets or self._committed(offsets, self._commit(offsets))

    async def _commit_off_loop(self) -> bool:
        offsets = self._finished_offsets(None)
        return not offsets or self._committed(offsets, await self.calls.run(self._commit, offsets))

    def _finished_offsets(
        self, only: set[TP] | None, positions: list[TopicPartition] | None = None
    ) -> list[TopicPartition]:
        """What to commit (`finished_offsets`); the transport is made durable first."""
        self._pass_undelivered(positions)
        offsets = finished_offsets(self.trackers, self.commit_metadata, only)
        if offsets:
            self.transport.make_durable()
        return offsets

    def _commit(self, offsets: list[TopicPartition]) -> bool:
        return self.settings.dry_run or commit_offsets(self.consumer, offsets)  # a dry run only pretends

    def _committed(self, offsets: list[TopicPartition], ok: bool) -> bool:
        if ok:
            self.finished_since_commit = 0
            mark_committed(self.trackers, offsets)
        return ok

    def _pass_undelivered(self, positions: list[TopicPartition] | None = None) -> None:
        pass_undelivered(self.consumer, self.trackers, positions)  # a replay (bounded.py): within its range

    def _update_lag(self) -> None:
        """Set `olstream_sink_lag` (`LagGauge.update`) here; the loop uses `_update_lag_off_loop`."""
        self.lag.update(self._commit_positions(), self.pauses.paused)

    async def _update_lag_off_loop(self) -> None:
        """The broker is asked on the Kafka thread, the gauge and its state are set here."""
        positions = self._commit_positions()
        unknown = self.lag.unknown(positions)
        reading = await self.calls.run(self.lag.read, list(positions), frozenset(self.pauses.paused), unknown)
        self.lag.apply(positions, reading)

    def _commit_positions(self) -> dict[TP, int | None]:
        return {tp: tracker.committed for tp, tracker in self.trackers.items()}

    def _idle(self) -> bool:
        """Nothing held, sent, repeated or waiting, and everything finished is committed: the workers
        wait for the loop, which alone changes the state until it admits again."""
        if (
            not self.assigned_once
            or self.buffered
            or self.in_flight
            or self.repeats.pending
            or self.ready.qsize()
        ):
            return False
        return all(t.committable() is None for t in self.trackers.values())

    def _at_end(self) -> bool:
        """True when every owned partition is consumed to its end and everything is committed."""
        return self._idle() and consumed_to_end_of(self.consumer, self.trackers)

    # -- the loop --------------------------------------------------------------------------
    async def run(self) -> int:
        self.consumer.subscribe(
            [self.settings.topic], on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.stopping.set)
        with contextlib.suppress(ValueError):  # chained after asyncio's handlers (main thread only)
            install_stop_deadline(self.settings.stop_timeout, "sink")
        await self.transport.start()
        workers = [asyncio.create_task(self._worker()) for _ in range(self.settings.concurrency)]
        try:
            await self._consume_until_stopped()
        finally:
            await self._shut_down(workers)
        return 0

    async def _consume_until_stopped(self) -> None:
        """Consume, commit and watch for the end. Every consumer call is made from here and those that
        may wait (polling among them) are awaited on the Kafka thread, so the consumer is never used
        from two threads at once; the rebalance callbacks that polling runs hand their state to the
        loop (`KafkaCalls.on_loop`), which is free: this coroutine only awaits the poll."""
        last_commit = time.monotonic()
        while not self.stopping.is_set():
            self._apply_pause()
            messages = await self.calls.run(self.consumer.consume, CONSUME_BATCH, 0)
            for message in messages:
                self._admit(message)
            if self.dlq is not None:
                self.dlq.poll(0)
            now = time.monotonic()
            if (
                now - last_commit >= self.settings.commit_interval
                or self.finished_since_commit >= COMMIT_EVERY
            ):
                await self._commit_off_loop()
                await self._update_lag_off_loop()
                last_commit = now
            if self.settings.until_idle and not messages and now - self._last_idle_check >= 0.3:
                self._last_idle_check = now
                if await self._consumed_to_end():
                    log.info("consumed %s to its end, everything committed: exiting", self.settings.topic)
                    return
            await asyncio.sleep(0 if messages else 0.005)

    async def _consumed_to_end(self) -> bool:
        if self.dlq is not None:
            await flush(self.dlq, 10)
        if not await self._commit_off_loop() or not self._idle():
            return False
        return await self.calls.run(self._at_end)  # safe off the loop: the workers wait (`_idle`)

    async def _shut_down(self, workers: list[asyncio.Task[None]]) -> None:
        deadline = time.monotonic() + min(self.settings.total_timeout, 10.0)
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        await self._flush_repeats(deadline)
        if self.dlq is not None:
            await flush(self.dlq, 10)
        await self._commit_off_loop()
        await self.transport.close()
        await self.calls.run(self.consumer.close)  # its revocation commits there, its bookkeeping here
        self.calls.close()

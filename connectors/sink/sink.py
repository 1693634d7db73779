"""The sink's consumer loop: Kafka -> receiver, at-least-once, per-run order, bounded concurrency.

One asyncio loop owns everything: the confluent-kafka consumer is polled without blocking
(`consume(timeout=0)`, so rebalance callbacks run on this thread too), `concurrency` worker
coroutines send events through the transport, and offsets are committed manually
(`enable.auto.commit=false`) over each partition's contiguous prefix of finished events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

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
from olstream.connectors.sink.job_versions import LatestTerminals, terminal_of_message
from olstream.connectors.sink.lag import LagGauge
from olstream.connectors.sink.metrics import (
    BACKOFF_SECONDS,
    CIRCUIT_OPEN,
    DEAD_LETTERED,
    DELIVERED,
    IN_FLIGHT,
    REPEATED,
    RETRIED,
)
from olstream.connectors.sink.repeats import Repeats
from olstream.connectors.sink.settings import SinkSettings
from olstream.connectors.sink.transports import HttpTransport, SinkTransport
from olstream.contract import wire
from olstream.shared import deadletter
from olstream.shared.errors import InfrastructureError
from olstream.shared.idle import consumed_to_end
from olstream.shared.logs import redact
from olstream.shared.metrics import set_health
from olstream.shared.stopping import install_stop_deadline

log = logging.getLogger(__name__)

TP = tuple[str, int]
CONSUME_BATCH = 500
COMMIT_EVERY = 2000  # finished events; commits also happen every commit interval


class Sink(LagGauge, Repeats):
    def __init__(
        self,
        settings: SinkSettings,
        transport: SinkTransport,
        consumer: Consumer,
        dlq: Producer | None,
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
        self.trackers: dict[TP, ContiguousCommitTracker] = {}
        self.epochs: dict[TP, int] = {}
        self.starts: dict[TP, int] = {}  # where the group started on each owned partition (this assignment)
        self.ends: dict[TP, int] = {}  # the highest end of each owned partition seen, for the lag
        self.queues = KeyedQueues()
        self.latest = LatestTerminals(enabled=isinstance(transport, HttpTransport))
        self.repeating = 0  # repeats of terminal events handed out and not settled yet
        self.ready: asyncio.Queue[PendingEvent] = asyncio.Queue()
        self.buffered = 0
        self.in_flight = 0
        self.paused: set[TP] = set()
        self.pause_reason: str | None = None
        self.fresh: set[TP] = set()  # newly assigned: resumed explicitly once, whatever came before
        self.finished_since_commit = 0
        self.commit_metadata: dict[TP, str] = {}  # per partition, stored with each commit (a replay's range)
        self.assigned_once = False
        self.stopping = asyncio.Event()
        self._epoch = 0
        self._last_idle_check = 0.0

    # -- rebalance -------------------------------------------------------------------------
    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for p in partitions:
            tp = (p.topic, p.partition)
            self._epoch += 1
            self.epochs[tp] = self._epoch
            self.trackers[tp] = ContiguousCommitTracker()
            self.starts.pop(tp, None)
            self.ends.pop(tp, None)
            self.paused.discard(tp)
            self.fresh.add(tp)
        self.assigned_once = True
        log.info("assigned %s", sorted(f"{t}[{p}]" for t, p in ((q.topic, q.partition) for q in partitions)))

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {(p.topic, p.partition) for p in partitions}
        self.commit_finished(only=revoked)  # still owned during the callback
        self._forget(revoked)
        log.info("revoked %s", sorted(f"{t}[{p}]" for t, p in revoked))

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        lost = {(p.topic, p.partition) for p in partitions}
        self._forget(lost)  # never commit for partitions no longer owned
        log.warning("lost %s; their in-flight events will be redelivered by the new owner", sorted(lost))

    def _forget(self, partitions: set[TP]) -> None:
        for tp in partitions:
            tracker = self.trackers.pop(tp, None)
            if tracker is not None:
                self.buffered -= tracker.outstanding
            self.epochs.pop(tp, None)
            self.starts.pop(tp, None)
            self.ends.pop(tp, None)
            self.paused.discard(tp)
            self.fresh.discard(tp)
        self.queues.drop_partitions(partitions)
        self.retries.drop_partitions(partitions)
        self.latest.forget(partitions)

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
        self.starts.setdefault(tp, offset)
        self.buffered += 1
        first = self.queues.add(event)
        if first is not None:
            self.ready.put_nowait(first)

    def _apply_pause(self) -> None:
        high = self.settings.max_buffered
        want_pause = self.backoff.active or self.buffered >= high
        want_resume = not self.backoff.active and self.buffered <= high // 2
        owned = set(self.epochs)
        if self.fresh and not want_pause:
            self.consumer.resume([TopicPartition(t, p) for t, p in self.fresh if (t, p) in owned])
        self.fresh.clear()
        if want_pause:
            reason = "backing off" if self.backoff.active else "buffer full"
            if reason != self.pause_reason:  # logged when the reason changes, not every cycle
                log.info("pausing consumption (%s, %d events held); still polling", reason, self.buffered)
                self.pause_reason = reason
            if owned - self.paused:
                self.consumer.pause([TopicPartition(t, p) for t, p in owned - self.paused])
                self.paused |= owned
        elif want_resume and self.paused:
            self.consumer.resume([TopicPartition(t, p) for t, p in self.paused if (t, p) in owned])
            self.paused.clear()
            log.debug("resuming consumption")

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
                self.latest.sending(event)
            try:
                results = await self._send(batch)
            finally:
                self.in_flight -= len(batch)
                IN_FLIGHT.dec(len(batch))
            settled = sorted(
                zip(batch, results, strict=True), key=lambda p: p[1].outcome is not Outcome.DELIVERED
            )
            for event, result in settled:  # deliveries first: they reset the backoff, failures then set it
                repeat = self.latest.settled(event, result.outcome is Outcome.DELIVERED)
                self._settle(event, result, generation)
                if repeat is not None and not self._stale(repeat):
                    self.repeating += 1
                    self.ready.put_nowait(repeat)
            CIRCUIT_OPEN.set(1 if self.backoff.attempt else 0)  # opened by failures, closed by a delivery

    async def _send(self, batch: list[PendingEvent]) -> list[DeliveryResult]:
        if len(batch) == 1 or not isinstance(self.transport, HttpTransport):
            return [await self.transport.send(e) for e in batch]
        results, whole = await self.transport.send_batch(batch)
        if whole and results[0].outcome is Outcome.REJECTED:
            # the receiver refused the batch as a whole: find the culprits one by one
            return [await self.transport.send(e) for e in batch]
        return results

    def _settle(self, event: PendingEvent, result: DeliveryResult, generation: int) -> None:
        if self._stale(event):
            if event.repeat:
                self.repeating -= 1
            return  # revoked meanwhile: the new owner delivers it again
        if event.repeat and result.outcome in (Outcome.REJECTED, Outcome.MISCONFIGURED):
            return self._give_up_repeat(event, f"HTTP {result.status}")
        if result.outcome is Outcome.DELIVERED:
            (REPEATED if event.repeat else DELIVERED).inc()
            if self.backoff.attempt:
                log.info("receiver accepts events again (%s)", self.settings.destination)
                self.pause_reason = None
                set_health(True)
            self.retries.delivered(event.ident)
            if event.repeat:
                self.repeating -= 1
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
        elif event.repeat:
            self.repeating -= 1

    def _log_failure(self, event: PendingEvent, result: DeliveryResult, wait: float) -> None:
        what = f"HTTP {result.status}" if result.status is not None else result.detail
        if result.outcome is Outcome.MISCONFIGURED or result.outcome is Outcome.REJECTED:
            log.error(
                "CONFIGURATION PROBLEM: %s answered %s for %s (%s): check the URL, endpoint and API key; "
                "nothing is dead-lettered, retrying in %.1f s",
                self.settings.destination,
                what,
                event.where(),
                result.detail[:200],
                wait,
            )
            set_health(False, redact(f"receiver answered {what}: configuration problem"))
        else:
            log.warning(
                "cannot deliver %s to %s: %s; retrying in %.1f s%s",
                event.where(),
                self.settings.destination,
                what,
                wait,
                " (Retry-After)" if result.retry_after is not None else "",
            )
        BACKOFF_SECONDS.set(wait)

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
        headers: list[tuple[str, str | bytes | None]] = [
            (deadletter.ERROR, reason),
            (deadletter.HTTP_STATUS, str(result.status if result.status is not None else "")),
            # the answer as given, but never a credential it echoes (the URL, its user info, the key)
            (deadletter.HTTP_RESPONSE, redact(result.detail).encode("utf-8")[: deadletter.RESPONSE_LIMIT]),
            *deadletter.origin_headers(event.topic, event.partition, event.offset),
            *event.redrive,  # a re-driven event that failed again keeps its attempt count
        ]

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                log.error("cannot dead-letter %s (%s); will try again", event.where(), err)
                self.ready.put_nowait(event)
                return
            DEAD_LETTERED.inc()
            log.warning(
                "%s %s with HTTP %s (%s); dead-lettered to %s",
                "receiver rejected" if reason == deadletter.REJECTED else "gave up on",
                event.where(),
                result.status,
                result.detail[:300],
                self.settings.dlq_topic,
            )
            self._finish(event)

        topic = self.settings.dlq_topic
        self.dlq.produce(topic, event.value, event.key, headers=headers, on_delivery=delivered)
        self.dlq.poll(0)

    # -- committing ------------------------------------------------------------------------
    def commit_finished(self, only: set[TP] | None = None) -> bool:
        """Commit each owned partition's finished prefix; the transport is made durable first."""
        self._pass_undelivered()
        offsets = []
        for tp, tracker in self.trackers.items():
            offset = tracker.committable()
            if offset is not None and (only is None or tp in only):  # each commit keeps its metadata
                offsets.append(TopicPartition(*tp, offset, metadata=self.commit_metadata.get(tp, "")))
        if not offsets:
            return True
        self.transport.make_durable()
        if not self.settings.dry_run:  # a dry run only pretends, locally
            try:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as e:
                log.warning("offset commit failed (will retry): %s", e)
                return False
        self.finished_since_commit = 0
        for tp_offset in offsets:
            owned = self.trackers.get((tp_offset.topic, tp_offset.partition))
            if owned is not None:
                owned.mark_committed(tp_offset.offset)
        return True

    def _pass_undelivered(self) -> None:  # a replay (bounded.py) commits within its range only
        pass_undelivered(self.consumer, self.trackers)

    def _at_end(self) -> bool:
        """True when every owned partition is consumed to its end and everything is committed."""
        if not self.assigned_once or self.buffered or self.in_flight or self.repeating or self.ready.qsize():
            return False
        if any(t.committable() is not None for t in self.trackers.values()):
            return False
        for tp, tracker in list(self.trackers.items()):  # one at a time: the first one behind ends it
            bounds = self.consumer.get_watermark_offsets(TopicPartition(*tp), timeout=10, cached=False)
            position = tracker.committed  # past transaction markers too (`pass_undelivered`)
            if position is None:
                position = self.consumer.committed([TopicPartition(*tp)], timeout=10)[0].offset
            if not consumed_to_end({tp: bounds}, {tp: position}):
                return False
        return True

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
        last_commit = time.monotonic()
        while not self.stopping.is_set():
            self._apply_pause()
            messages = self.consumer.consume(CONSUME_BATCH, timeout=0)
            for message in messages:
                self._admit(message)
            if self.dlq is not None:
                self.dlq.poll(0)
            now = time.monotonic()
            if (
                now - last_commit >= self.settings.commit_interval
                or self.finished_since_commit >= COMMIT_EVERY
            ):
                self.commit_finished()
                self._update_lag()
                last_commit = now
            if self.settings.until_idle and not messages and now - self._last_idle_check >= 0.3:
                self._last_idle_check = now
                if self.dlq is not None:
                    self.dlq.flush(10)
                if self.commit_finished() and self._at_end():
                    log.info("consumed %s to its end, everything committed: exiting", self.settings.topic)
                    return
            await asyncio.sleep(0 if messages else 0.005)

    async def _shut_down(self, workers: list[asyncio.Task[None]]) -> None:
        deadline = time.monotonic() + min(self.settings.total_timeout, 10.0)
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        await self._flush_repeats(deadline)
        if self.dlq is not None:
            self.dlq.flush(10)
        self.commit_finished()
        await self.transport.close()
        self.consumer.close()

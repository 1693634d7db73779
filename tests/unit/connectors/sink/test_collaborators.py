"""The sink's collaborators on their own (lag, repeats, pauses, the Kafka thread and the way back to
the loop), a whole run of the sink whose consumer records any call that waits on a broker from the
event loop, and a run through a revocation and a lost assignment: polled and committed on the Kafka
thread, the sink's state changed on the loop only, the loop free while the revocation commits."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from olstream.connectors.sink.delivery import DELIVERED
from olstream.connectors.sink.job_versions import LatestTerminals
from olstream.connectors.sink.kafka_calls import KafkaCalls, flush
from olstream.connectors.sink.lag import LAG, LagGauge, LagReading
from olstream.connectors.sink.pauses import Pauses
from olstream.connectors.sink.repeats import Repeats
from olstream.connectors.sink.settings import SinkSettings
from olstream.connectors.sink.sink import Sink
from tests.support.fake_message import FakeMessage
from tests.unit.connectors.sink.test_job_versions import terminal
from tests.unit.connectors.sink.test_run_order import ScriptedTransport, message

OFFSET_INVALID = -1001
TP = tuple[str, int]


def on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class BrokerConsumer:
    """A consumer of topic `t`, partition 0, that records each call waiting on the broker, and where."""

    def __init__(self, messages: list[FakeMessage], delay: float = 0.0) -> None:
        self.messages = messages
        self.delay = delay  # how long a broker's answer takes
        self.calls: list[tuple[str, bool]] = []  # (call, made on the event loop)
        self.group: dict[int, int] = {}
        self.callbacks: dict[str, Any] = {}
        self.assigned = False

    def _broker(self, call: str) -> None:
        self.calls.append((call, on_loop()))
        time.sleep(self.delay)

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.callbacks = callbacks

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        self.calls.append(("consume", on_loop()))
        if not self.assigned:
            self.assigned = True
            self.callbacks["on_assign"](self, [TopicPartition("t", 0)])
            return []
        batch, self.messages = self.messages[:num_messages], self.messages[num_messages:]
        return batch

    def pause(self, partitions: list[TopicPartition]) -> None: ...

    def resume(self, partitions: list[TopicPartition]) -> None: ...

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, OFFSET_INVALID) for p in partitions]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> None:
        self._broker("commit")
        self.group.update({p.partition: p.offset for p in offsets})

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        self._broker("committed")
        return [
            TopicPartition(p.topic, p.partition, self.group.get(p.partition, OFFSET_INVALID))
            for p in partitions
        ]

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        if not cached:  # a cached end is read locally
            self._broker("get_watermark_offsets")
        return (0, 10)

    def close(self) -> None:
        self._broker("close")


class Dlq:
    def __init__(self) -> None:
        self.flushed_on_loop: list[bool] = []
        self.polls = 0

    def __len__(self) -> int:
        return 0

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0

    def flush(self, timeout: float) -> int:
        self.flushed_on_loop.append(on_loop())
        return 0


def test_no_kafka_call_that_waits_on_a_broker_is_made_on_the_event_loop() -> None:
    """A sink run to the end of its topic: every commit, watermark and committed-offset query and
    the close run off the loop, while the loop goes on (a slow broker never stops the sends)."""
    consumer = BrokerConsumer([message(0, n, f"run-{n % 3}") for n in range(10)], delay=0.05)
    transport, dlq = ScriptedTransport(lambda e, n: DELIVERED), Dlq()
    settings = SinkSettings(transport="console", until_idle=True, commit_interval=0.0, concurrency=4)
    sink = Sink(settings, transport, consumer, dlq)  # type: ignore[arg-type]
    result: list[int] = []
    # on a thread of its own: the sink's signal handlers and stop deadline are for a main thread
    runner = threading.Thread(target=lambda: result.append(asyncio.run(sink.run())))
    runner.start()
    runner.join(30)
    assert result == [0] and len(transport.delivered) == 10 and consumer.group == {0: 10}
    made = {call for call, _ in consumer.calls}
    assert made >= {"consume", "commit", "committed", "get_watermark_offsets", "close"}, made
    assert [call for call, on_the_loop in consumer.calls if on_the_loop] == []
    assert dlq.flushed_on_loop == [] and dlq.polls > 0  # flushed by polling from the loop instead


def test_kafka_calls_run_on_one_other_thread_and_return_their_result() -> None:
    calls = KafkaCalls()

    async def main() -> tuple[str, str]:
        first = await calls.run(lambda: threading.current_thread().name)
        return first, await calls.run(lambda: threading.current_thread().name)

    first, second = asyncio.run(main())
    calls.close()
    assert (
        first == second
        and first.startswith("olstream-sink-kafka")
        and first != threading.current_thread().name
    )


def test_flush_polls_the_producer_until_it_holds_nothing() -> None:
    class Producer:
        def __init__(self) -> None:
            self.held = 3

        def __len__(self) -> int:
            return self.held

        def poll(self, timeout: float) -> int:
            self.held -= 1
            return 1

    producer = Producer()
    assert asyncio.run(flush(producer, 5)) == 0 and producer.held == 0


class PausingConsumer:
    def __init__(self) -> None:
        self.paused: set[tuple[str, int]] = set()
        self.resumed: list[set[tuple[str, int]]] = []

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused |= {(p.topic, p.partition) for p in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        self.paused -= tps
        self.resumed.append(tps)


def test_pauses_hold_the_owned_partitions_while_full_or_backing_off_and_resume_at_half() -> None:
    consumer = PausingConsumer()
    pauses = Pauses(consumer, max_buffered=10)
    owned = {("t", 0), ("t", 1)}
    for tp in owned:
        pauses.assigned(tp)
    pauses.apply(owned, backing_off=False, buffered=0)
    assert consumer.resumed == [owned] and not pauses.fresh  # newly assigned: resumed once
    pauses.apply(owned, backing_off=False, buffered=10)
    assert consumer.paused == owned == pauses.paused and pauses.reason == "buffer full"
    pauses.apply(owned, backing_off=False, buffered=6)  # above half: still paused
    assert consumer.paused == owned
    pauses.apply(owned, backing_off=True, buffered=0)  # the receiver's circuit is open
    assert consumer.paused == owned and pauses.reason == "backing off"
    pauses.apply(owned, backing_off=False, buffered=5)
    assert consumer.paused == set() == pauses.paused
    pauses.forget(("t", 1))
    pauses.apply({("t", 0)}, backing_off=True, buffered=0)
    assert consumer.paused == {("t", 0)}


def test_repeats_count_what_is_handed_out_until_it_settles() -> None:
    latest = LatestTerminals(enabled=True)
    repeats = Repeats(latest)
    old, new = terminal(0, 5), terminal(1, 10)
    for event in (new, old):  # the older run is applied last: the newer one is repeated
        latest.sending(event)
    assert repeats.after_settling(new, True, lambda e: False) is None
    repeat = repeats.after_settling(old, True, lambda e: False)
    assert repeat is not None and repeat.repeat and repeats.pending == 1
    assert repeats.kept([old, repeat]) == [repeat]
    assert repeats.sendable([repeat], lambda e: True) == [] and repeats.pending == 0  # revoked meanwhile
    assert Repeats.for_transport(ScriptedTransport(lambda e, n: DELIVERED)).latest.enabled is False  # type: ignore[arg-type]


def test_a_stale_repeat_is_not_handed_out() -> None:
    latest = LatestTerminals(enabled=True)
    repeats = Repeats(latest)
    old, new = terminal(0, 5), terminal(1, 10)
    for event in (new, old):
        latest.sending(event)
    repeats.after_settling(new, True, lambda e: False)
    assert repeats.after_settling(old, True, lambda e: True) is None and repeats.pending == 0
    repeats.pending = 1
    repeats.give_up(replace(new, repeat=True), "HTTP 400")
    assert repeats.pending == 0


def test_the_lag_gauge_counts_from_the_commit_else_from_where_the_group_started() -> None:
    consumer = BrokerConsumer([])
    consumer.group = {1: 4}
    gauge = LagGauge(consumer)  # type: ignore[arg-type]
    gauge.started(("t", 0), 2)
    gauge.started(("t", 0), 7)  # read again: where it started stays
    gauge.update({("t", 0): None, ("t", 1): None, ("t", 2): 9}, paused=set())
    assert gauge.starts == {("t", 0): 2, ("t", 1): 4, ("t", 2): 0} and LAG._value.get() == 8 + 6 + 1
    gauge.forget([("t", 0)])
    assert ("t", 0) not in gauge.starts and ("t", 0) not in gauge.ends


def test_on_loop_runs_a_call_of_the_kafka_thread_on_the_loop_and_hands_back_its_result() -> None:
    calls = KafkaCalls()

    def on_the_loop_thread() -> str:
        assert on_loop()
        return threading.current_thread().name

    def refused() -> None:
        raise ValueError("refused")

    def on_the_kafka_thread() -> tuple[str, str]:
        with pytest.raises(ValueError, match="refused"):
            calls.on_loop(refused)  # raised where it was asked for
        return threading.current_thread().name, calls.on_loop(on_the_loop_thread)

    async def main() -> tuple[str, str, str]:
        kafka_thread, loop_thread = await calls.run(on_the_kafka_thread)
        return kafka_thread, loop_thread, calls.on_loop(on_the_loop_thread)  # on the loop: at once

    kafka_thread, loop_thread, direct = asyncio.run(main())
    calls.close()
    here = threading.current_thread().name
    assert kafka_thread.startswith("olstream-sink-kafka") and loop_thread == direct == here
    assert calls.on_loop(lambda: 7) == 7  # its loop is closed: nothing else runs there any more


def test_on_loop_without_a_loop_runs_the_call_at_once() -> None:
    assert KafkaCalls().on_loop(lambda x: x + 1, 1) == 2  # no call yet: no loop (a test's own calls)


class RebalancingConsumer(BrokerConsumer):
    """Partitions 0 and 1, five messages each; once the ten are delivered, 1 is revoked and 0 lost.
    Its commit checks that the loop is free meanwhile and has forgotten the revoked partition."""

    def __init__(self, sink: Callable[[], Sink], delivered: Callable[[], int]) -> None:
        super().__init__([message(p, n, f"run-{p}-{n}") for p in (0, 1) for n in range(5)], delay=0.05)
        self.sink, self.delivered = sink, delivered
        self.loop: asyncio.AbstractEventLoop | None = None
        self.step = 0
        self.loop_free_in_commit: list[bool] = []
        self.forgotten_in_commit: list[bool] = []

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        self.calls.append(("consume", on_loop()))
        self.step += 1
        if self.step == 1:
            self.callbacks["on_assign"](self, [TopicPartition("t", 0), TopicPartition("t", 1)])
            return []
        if self.step == 2:
            return list(self.messages)
        if self.delivered() == len(self.messages) and self.loop_free_in_commit == []:
            self.callbacks["on_revoke"](self, [TopicPartition("t", 1)])
            self.callbacks["on_lost"](self, [TopicPartition("t", 0)])
        return []

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self.calls.append(("position", on_loop()))  # not waiting on a broker, but while polling
        return super().position(partitions)

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> None:
        assert self.loop is not None
        ask = asyncio.run_coroutine_threadsafe(self._forgotten(), self.loop)
        try:
            self.forgotten_in_commit.append(ask.result(timeout=5))
            self.loop_free_in_commit.append(True)
        except TimeoutError:
            self.loop_free_in_commit.append(False)
        super().commit(offsets, asynchronous)

    async def _forgotten(self) -> bool:
        sink = self.sink()
        return ("t", 1) not in sink.epochs and ("t", 1) not in sink.trackers


class ThreadRecordingSink(Sink):
    """Records, for each change of its rebalance state, whether it ran on the event loop."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.changes: list[tuple[str, bool]] = []

    def _assigned(self, partitions: list[TopicPartition]) -> None:
        self.changes.append(("assigned", on_loop()))
        super()._assigned(partitions)

    def _revoked(self, revoked: set[TP], positions: list[TopicPartition]) -> list[TopicPartition]:
        self.changes.append(("revoked", on_loop()))
        return super()._revoked(revoked, positions)

    def _forget(self, partitions: set[TP]) -> None:
        self.changes.append(("forget", on_loop()))
        super()._forget(partitions)


def test_a_revocation_commits_on_the_kafka_thread_and_changes_the_state_on_the_loop() -> None:
    """The revoked partition's finished prefix is committed inside the callback, off the loop, while
    the loop goes on; the lost one is never committed; every change of state is made on the loop."""
    transport = ScriptedTransport(lambda e, n: DELIVERED)
    sinks: list[ThreadRecordingSink] = []
    consumer = RebalancingConsumer(lambda: sinks[0], lambda: len(transport.delivered))
    settings = SinkSettings(transport="console", commit_interval=3600.0, concurrency=4)
    sink = ThreadRecordingSink(settings, transport, consumer, None)
    sinks.append(sink)

    async def main() -> int:
        consumer.loop = asyncio.get_running_loop()
        running = asyncio.create_task(sink.run())
        deadline = time.monotonic() + 20
        while not (consumer.loop_free_in_commit and not sink.epochs) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # until revoked and lost
        sink.stopping.set()
        return await running

    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(asyncio.run(main())))
    runner.start()
    runner.join(30)
    assert result == [0] and len(transport.delivered) == 10
    assert consumer.group == {1: 5}  # the revoked partition only; the lost one never
    assert ("position", False) in consumer.calls  # the revocation's, on the thread that polls
    assert consumer.loop_free_in_commit == [True] and consumer.forgotten_in_commit == [True]
    assert [call for call, on_the_loop in consumer.calls if on_the_loop] == []
    assert [change for change, on_the_loop in sink.changes if not on_the_loop] == []
    assert [change for change, _ in sink.changes] == ["assigned", "revoked", "forget", "forget"]
    assert sink.trackers == {} and sink.epochs == {} and sink.buffered == 0


def test_the_lag_is_read_without_changing_the_gauge_and_applied_apart() -> None:
    consumer = BrokerConsumer([])
    consumer.group = {1: 4}
    gauge = LagGauge(consumer)  # type: ignore[arg-type]
    owned = {("t", 0): None, ("t", 1): None}
    reading = gauge.read(list(owned), paused=set(), unknown=gauge.unknown(owned))
    assert reading == LagReading({("t", 0): 0, ("t", 1): 4}, {("t", 0): 10, ("t", 1): 10})
    assert gauge.starts == {} and gauge.ends == {}  # read only
    gauge.apply(owned, reading)
    assert gauge.starts == {("t", 0): 0, ("t", 1): 4} and LAG._value.get() == 10 + 6

"""The sink's delivery order and retries, in-process with a scripted transport (no Kafka, no HTTP):
per-run order with runs of one key in parallel, a poison event dead-lettered while the rest flows,
an outage that dead-letters nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from prometheus_client import REGISTRY

from olstream.connectors.sink.delivery import (
    CIRCUIT_THRESHOLD,
    DELIVERED,
    Backoff,
    DeliveryResult,
    Outcome,
    PendingEvent,
    Retries,
    run_of,
)
from olstream.connectors.sink.settings import SinkSettings
from olstream.connectors.sink.sink import Sink
from olstream.contract import wire
from olstream.shared import deadletter
from tests.support.fake_message import FakeMessage

KEY = b"run:ns/one-hot-root-job"  # every run of one root job: one Kafka key


def message(partition: int, offset: int, run: str, *, header: bool = True) -> FakeMessage:
    """One event of `run` under the root job's key (its run id header only with `header`)."""
    value = json.dumps({"run": {"runId": run}, "n": offset}).encode()
    headers = [(wire.HEADER_RUN_ID, run.encode())] if header else None
    return FakeMessage(partition, offset, key=KEY, value=value, headers=headers)


class Committer:
    def __init__(self) -> None:
        self.commits: list[dict[int, int]] = []

    def commit(self, offsets: Any, asynchronous: bool = False) -> None:
        self.commits.append({tp.partition: tp.offset for tp in offsets})

    def get_watermark_offsets(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return (0, 0)

    def committed(self, *args: Any, **kwargs: Any) -> list[Any]:
        return []

    def position(self, partitions: list[Any]) -> list[Any]:
        return [SimpleNamespace(topic=p.topic, partition=p.partition, offset=-1001) for p in partitions]


class Dlq:
    def __init__(self) -> None:
        self.produced: list[tuple[bytes, dict[str, Any]]] = []

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Any, on_delivery: Any) -> None:
        self.produced.append((value, dict(headers)))
        on_delivery(None, None)

    def poll(self, timeout: float) -> int:
        return 0


class ScriptedTransport:
    """Answers per event with `answer(event, attempt)`; records order, concurrency and runs in flight."""

    def __init__(self, answer: Callable[[PendingEvent, int], DeliveryResult], delay: float = 0.002) -> None:
        self.answer = answer
        self.delay = delay
        self.attempts: dict[int, int] = {}
        self.delivered: list[PendingEvent] = []
        self.in_flight: set[str | None] = set()
        self.overlaps = 0
        self.peak = 0

    async def start(self) -> None: ...

    async def send(self, event: PendingEvent) -> DeliveryResult:
        if event.run in self.in_flight:
            self.overlaps += 1
        self.in_flight.add(event.run)
        self.peak = max(self.peak, len(self.in_flight))
        await asyncio.sleep(self.delay)
        self.in_flight.discard(event.run)
        n = self.attempts[event.offset] = self.attempts.get(event.offset, 0) + 1
        result = self.answer(event, n)
        if result.outcome is Outcome.DELIVERED:
            self.delivered.append(event)
        return result

    def make_durable(self) -> None: ...

    async def close(self) -> None: ...


def run_sink(
    transport: ScriptedTransport,
    messages: list[FakeMessage],
    settings: SinkSettings,
    until: Callable[[Sink], bool],
    timeout: float = 10.0,
) -> tuple[Sink, Dlq, Committer]:
    dlq, committer = Dlq(), Committer()

    async def scenario() -> Sink:
        sink = Sink(settings, transport, committer, dlq)  # type: ignore[arg-type]
        sink.on_assign(None, [_tp(0)])  # type: ignore[arg-type]
        for m in messages:
            sink._admit(m)  # type: ignore[arg-type]
        workers = [asyncio.create_task(sink._worker()) for _ in range(settings.concurrency)]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not until(sink) and loop.time() < deadline:
            await asyncio.sleep(0.005)
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        return sink

    return asyncio.run(scenario()), dlq, committer


def _tp(partition: int) -> Any:
    from confluent_kafka import TopicPartition

    return TopicPartition("t", partition)


def runs_of(n_runs: int, events_per_run: int, *, header: bool = True) -> list[FakeMessage]:
    """Events of `n_runs` runs interleaved on one partition and one key, each run's in order."""
    return [
        message(0, i * n_runs + r, f"run-{r}", header=header)
        for i in range(events_per_run)
        for r in range(n_runs)
    ]


def per_run_offsets(events: list[PendingEvent]) -> dict[str | None, list[int]]:
    out: dict[str | None, list[int]] = {}
    for e in events:
        out.setdefault(e.run, []).append(e.offset)
    return out


def test_runs_of_one_key_go_out_in_parallel_each_in_order() -> None:
    """The worker keys events by root job; one hot root job must not serialise its runs."""
    flaky = ScriptedTransport(
        lambda e, n: DeliveryResult(Outcome.RETRY, 503, "busy") if e.offset % 7 == 0 and n == 1 else DELIVERED
    )
    settings = SinkSettings(concurrency=8, backoff_initial=0.001, backoff_max=0.005)
    sink, dlq, _ = run_sink(flaky, runs_of(20, 3), settings, lambda s: s.buffered == 0)
    assert sink.buffered == 0 and len(flaky.delivered) == 60 and dlq.produced == []
    assert flaky.overlaps == 0, "two events of one run were in flight at once"
    assert flaky.peak > 4, f"runs of one key were not sent in parallel (peak {flaky.peak})"
    assert all(offsets == sorted(offsets) for offsets in per_run_offsets(flaky.delivered).values())
    assert sink.commit_finished()


def test_events_without_the_header_are_ordered_by_the_run_in_their_json() -> None:
    transport = ScriptedTransport(lambda e, n: DELIVERED)
    settings = SinkSettings(concurrency=8)
    run_sink(transport, runs_of(10, 3, header=False), settings, lambda s: s.buffered == 0)
    assert transport.overlaps == 0 and transport.peak > 2
    assert {e.run for e in transport.delivered} == {f"run-{r}" for r in range(10)}
    assert run_of(None, b"not json") is None and run_of(b"abc", b"{}") == "abc"


def test_a_poison_event_is_dead_lettered_after_the_retry_timeout_while_the_rest_flows() -> None:
    """The receiver accepts everything but one event (DataHub answers 500 to events it cannot map)."""
    poison = 5  # offset; its run is run-5, whose later events wait behind it
    transport = ScriptedTransport(
        lambda e, n: DeliveryResult(Outcome.RETRY, 500, "cannot map") if e.offset == poison else DELIVERED
    )
    settings = SinkSettings(concurrency=4, backoff_initial=0.01, backoff_max=0.05, retry_timeout=0.3)
    messages = runs_of(10, 2)
    sink, dlq, committer = run_sink(transport, messages, settings, lambda s: s.buffered == 0)
    assert sink.buffered == 0
    [(value, headers)] = dlq.produced
    assert json.loads(value)["n"] == poison
    assert headers[deadletter.ERROR] == deadletter.RETRIES_EXHAUSTED
    assert headers[deadletter.HTTP_STATUS] == "500" and headers[deadletter.HTTP_RESPONSE] == b"cannot map"
    assert transport.attempts[poison] > 2
    assert len(transport.delivered) == len(messages) - 1  # everything else, the poison's run included
    assert sink.backoff.attempt == 0, "one event's failures never opened the receiver's circuit"
    assert sink.commit_finished() and committer.commits[-1] == {0: len(messages)}


def test_an_outage_dead_letters_nothing_and_the_backlog_waits() -> None:
    """Every request fails for longer than the retry timeout: nothing is given up."""
    state = {"down": True}
    transport = ScriptedTransport(
        lambda e, n: DeliveryResult(Outcome.RETRY, None, "connection refused") if state["down"] else DELIVERED
    )
    settings = SinkSettings(concurrency=4, backoff_initial=0.01, backoff_max=0.05, retry_timeout=0.1)
    sink, dlq, _ = run_sink(transport, runs_of(10, 2), settings, lambda s: False, timeout=0.6)
    assert dlq.produced == [] and transport.delivered == [] and sink.buffered == 20
    assert sink.backoff.attempt > 0, "the receiver's circuit opened"

    state["down"] = False  # the receiver comes back, one failure later than the timeout
    flaky_once: set[int] = set()

    def answer(e: PendingEvent, n: int) -> DeliveryResult:
        if e.offset == 3 and e.offset not in flaky_once:
            flaky_once.add(e.offset)
            return DeliveryResult(Outcome.RETRY, 503, "busy")
        return DELIVERED

    transport2 = ScriptedTransport(answer)
    _, dlq2, _ = run_sink(transport2, runs_of(10, 2), settings, lambda s: s.buffered == 0)
    assert dlq2.produced == [] and len(transport2.delivered) == 20


def circuit_gauge() -> float | None:
    return REGISTRY.get_sample_value("olstream_sink_circuit_open")


def test_the_circuit_gauge_is_1_while_the_receiver_fails_and_0_after_a_delivery() -> None:
    """`olstream_sink_circuit_open` (OlstreamSinkCircuitOpen in deploy/prometheus): open during an
    outage, closed by the next delivery, never opened by one poison event."""
    state = {"down": True}
    transport = ScriptedTransport(
        lambda e, n: DeliveryResult(Outcome.RETRY, 503, "down") if state["down"] else DELIVERED
    )
    settings = SinkSettings(concurrency=4, backoff_initial=0.01, backoff_max=0.05, retry_timeout=0)
    sink, _, _ = run_sink(transport, runs_of(10, 2), settings, lambda s: s.backoff.attempt >= 2)
    assert sink.backoff.attempt >= 2 and circuit_gauge() == 1

    state["down"] = False
    transport = ScriptedTransport(lambda e, n: DELIVERED)
    run_sink(transport, runs_of(10, 2), settings, lambda s: s.buffered == 0)
    assert circuit_gauge() == 0

    poison = ScriptedTransport(
        lambda e, n: DeliveryResult(Outcome.RETRY, 500, "no") if e.offset == 4 else DELIVERED
    )
    sink, _, _ = run_sink(poison, runs_of(10, 2), settings, lambda s: poison.attempts.get(4, 0) >= 3)
    assert sink.backoff.attempt == 0 and circuit_gauge() == 0


def test_retries_tell_an_events_failures_from_the_receivers() -> None:
    now = [0.0]
    circuit = Backoff(1.0, 8.0, clock=lambda: now[0], rng=lambda: 0.5)
    retries = Retries(circuit, 10.0, 1.0, 8.0, clock=lambda: now[0], rng=lambda: 0.5)
    fail = DeliveryResult(Outcome.RETRY, 500, "no")
    wait, receiver_wide = retries.failed(("t", 0, 1), fail, circuit.generation)
    assert not receiver_wide and wait == 1.0 and not circuit.active
    now[0] = 1.0
    retries.delivered(("t", 0, 2))  # another event gets through
    now[0] = 11.0
    retries.failed(("t", 0, 1), fail, circuit.generation)
    assert retries.expired(("t", 0, 1)), "failed alone for the timeout while others were delivered"
    for offset in range(3, 3 + CIRCUIT_THRESHOLD):  # distinct events failing, nothing delivered
        _, receiver_wide = retries.failed(("t", 0, offset), fail, circuit.generation)
    assert receiver_wide and circuit.active
    assert not retries.expired(("t", 0, 1)), "an open circuit gives nothing up"
    rate_limited = DeliveryResult(Outcome.RETRY, 429, "slow down", retry_after=30.0)
    retries.delivered(("t", 0, 9))
    assert retries.failed(("t", 0, 10), rate_limited, circuit.generation) == (30.0, True)

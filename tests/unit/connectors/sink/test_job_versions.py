"""Each job ends at its latest run's version: the sink repeats a job's latest terminal event when the
receiver may have applied an older one after it (`job_versions`; no Kafka, no HTTP)."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from olstream.connectors.sink.delivery import DELIVERED, DeliveryResult, Outcome, PendingEvent, Terminal
from olstream.connectors.sink.job_versions import LatestTerminals, terminal_of, terminal_of_message
from olstream.connectors.sink.settings import SinkSettings
from olstream.connectors.sink.sink import Sink
from olstream.contract import wire
from tests.unit.connectors.sink.test_run_order import Committer, Dlq, _tp

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOB = ("acme", "ingest@1")


def event_time(minute: int) -> str:
    return (T0 + timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")


def terminal(offset: int, minute: int, run: str | None = None, partition: int = 0) -> PendingEvent:
    run = run or f"run-{offset}"
    mark = Terminal(JOB, (T0 + timedelta(minutes=minute), run))
    return PendingEvent("t", partition, offset, b"k", f"v{offset}".encode(), 1, run, mark)


def test_the_terminal_comes_from_the_workers_headers_else_from_the_json() -> None:
    doc = {"eventType": "COMPLETE", "eventTime": "2026-01-01T00:05:00.5+01:00",
           "job": {"namespace": "acme", "name": "a@1"}, "run": {"runId": "r"}}  # fmt: skip
    from_json = terminal_of("r", None, None, None, None, json.dumps(doc).encode())
    assert from_json == Terminal(("acme", "a@1"), (datetime(2025, 12, 31, 23, 5, 0, 500000, tzinfo=UTC), "r"))
    headers = [
        (wire.HEADER_EVENT_TYPE, b"FAIL"),
        (wire.HEADER_EVENT_TIME, b"2026-01-01T00:05:00Z"),
        (wire.HEADER_JOB_NAMESPACE, b"acme"),
        (wire.HEADER_JOB_NAME, "é@1".encode()),
    ]
    want = Terminal(("acme", "é@1"), (T0.replace(minute=5), "r"))
    assert terminal_of_message("r", headers, b"not json") == want
    assert terminal_of_message("r", [(wire.HEADER_EVENT_TYPE, b"START"), *headers[1:]], b"") is None

    def of_json(run: str | None, **fields: str) -> Terminal | None:
        return terminal_of(run, None, None, None, None, json.dumps({**doc, **fields}).encode())

    assert of_json("r", eventType="START") is None
    assert of_json("r", eventTime="2026-01-01") is None  # no offset: not an instant
    assert of_json(None) is None  # no run: no rank
    assert terminal_of("r", None, None, None, None, b"[1]") is None


def test_terminal_events_in_time_order_one_after_another_need_no_repeat() -> None:
    latest = LatestTerminals()
    for offset in range(5):
        e = terminal(offset, offset)
        latest.sending(e)
        assert latest.settled(e, delivered=True) is None
    assert latest.repeats == 0


def test_an_older_terminal_event_delivered_after_the_latest_brings_a_repeat_of_the_latest() -> None:
    latest = LatestTerminals()
    newer, older = terminal(0, 10), terminal(1, 5)
    for e, want in ((newer, None), (older, newer)):
        latest.sending(e)
        repeat = latest.settled(e, delivered=True)
        assert (repeat is None) == (want is None)
    assert repeat is not None and repeat.repeat
    assert (repeat.value, repeat.offset) == (newer.value, newer.offset)
    latest.sending(repeat)
    assert latest.settled(repeat, delivered=True) is None  # the repeat itself settles it


def test_two_terminal_events_of_a_job_in_flight_at_once_bring_one_repeat_once_both_are_answered() -> None:
    latest = LatestTerminals()
    newer, older = terminal(0, 10), terminal(1, 5)
    latest.sending(newer)
    latest.sending(older)  # their order at the receiver is unknown
    assert latest.settled(newer, delivered=True) is None  # the older one is still in flight
    repeat = latest.settled(older, delivered=True)
    assert repeat is not None and repeat.value == newer.value
    assert latest.repeats == 1


def test_a_failed_older_event_may_have_been_applied_and_a_tie_goes_to_the_greater_run_id() -> None:
    latest = LatestTerminals()
    newer, older = terminal(0, 10), terminal(1, 5)
    latest.sending(newer)
    latest.settled(newer, delivered=True)
    latest.sending(older)
    assert latest.settled(older, delivered=False) is not None  # a timeout can still have been applied
    tie_low, tie_high = terminal(2, 20, run="a"), terminal(3, 20, run="b")
    latest.sending(tie_high)
    latest.settled(tie_high, delivered=True)
    latest.sending(tie_low)
    repeat = latest.settled(tie_low, delivered=True)
    assert repeat is not None and repeat.value == tie_high.value


def test_a_file_or_the_console_gets_no_repeats() -> None:
    latest = LatestTerminals(enabled=False)
    for e in (terminal(0, 10), terminal(1, 5)):
        latest.sending(e)
        assert latest.settled(e, delivered=True) is None


def test_revoked_partitions_forget_their_latest_events() -> None:
    latest = LatestTerminals()
    newer, older = terminal(0, 10), terminal(1, 5)
    latest.sending(newer)
    latest.settled(newer, delivered=True)
    latest.forget({("t", 0)})
    latest.sending(older)
    assert latest.settled(older, delivered=True) is None  # nothing left to repeat: the new owner's job


class Message:
    def __init__(self, offset: int, run: str, kind: str, minute: int, job: str) -> None:
        self._o, self._run, self._kind, self._minute, self._job = offset, run, kind, minute, job

    def error(self) -> None:
        return None

    def headers(self) -> list[tuple[str, bytes]]:
        return [(wire.HEADER_RUN_ID, self._run.encode()), (wire.HEADER_EVENT_TYPE, self._kind.encode()),
                (wire.HEADER_EVENT_TIME, event_time(self._minute).encode()),
                (wire.HEADER_JOB_NAMESPACE, b"acme"), (wire.HEADER_JOB_NAME, self._job.encode())]  # fmt: skip

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes:
        return b"run:acme/root"

    def value(self) -> bytes:
        doc = {"run": self._run, "type": self._kind, "minute": self._minute, "job": self._job}
        return json.dumps(doc).encode()


class ApplyingReceiver:
    """Applies each event at a random moment of its request (as a receiver's threads do) and keeps,
    per job, the run of the last terminal event applied."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.last: dict[str, tuple[int, str]] = {}  # job -> (minute, run) of the last terminal applied
        self.last_of_records: dict[str, tuple[int, str]] = {}  # the same, repeats left out
        self.posts = 0

    async def start(self) -> None: ...

    async def send(self, event: PendingEvent) -> DeliveryResult:
        await asyncio.sleep(self.rng.uniform(0, 0.004))
        doc: dict[str, Any] = json.loads(event.value)
        self.posts += 1
        if doc["type"] != "START":
            self.last[doc["job"]] = (doc["minute"], doc["run"])
            if not event.repeat:
                self.last_of_records[doc["job"]] = (doc["minute"], doc["run"])
        await asyncio.sleep(self.rng.uniform(0, 0.004))
        return DELIVERED if self.rng.random() > 0.05 else DeliveryResult(Outcome.RETRY, 503, "busy")

    def make_durable(self) -> None: ...

    async def close(self) -> None: ...


def workload(rng: random.Random, runs: int) -> tuple[list[Message], dict[str, tuple[int, str]]]:
    """Runs of 3 jobs whose terminal events come in an order other than their eventTimes'."""
    messages: list[Message] = []
    latest: dict[str, tuple[int, str]] = {}
    for r in range(runs):
        job, run, minute = f"job-{r % 3}@1", f"run-{r:03d}", rng.randrange(60)
        messages.append(Message(len(messages), run, "START", minute, job))
        kind = rng.choice(("COMPLETE", "FAIL", "ABORT"))
        messages.append(Message(len(messages), run, kind, minute + 1, job))
        latest[job] = max(latest.get(job, (-1, "")), (minute + 1, run))
    return messages, latest


def test_after_idle_every_job_is_at_its_latest_run_whatever_the_receiver_applied_last() -> None:
    stale_without_repeats = 0
    settings = SinkSettings(concurrency=8, backoff_initial=0.001, backoff_max=0.005)
    for seed in range(12):
        rng = random.Random(seed)
        receiver = ApplyingReceiver(rng)
        messages, latest = workload(rng, 40)

        async def scenario(receiver: ApplyingReceiver, messages: list[Message]) -> Sink:
            sink = Sink(settings, receiver, Committer(), Dlq())  # type: ignore[arg-type]
            assert not sink.repeats.latest.enabled  # only HTTP receivers get repeats: this one stands for one
            sink.repeats.latest.enabled = True
            sink.on_assign(None, [_tp(0)])  # type: ignore[arg-type]
            for m in messages:
                sink._admit(m)  # type: ignore[arg-type]
            workers = [asyncio.create_task(sink._worker()) for _ in range(settings.concurrency)]
            deadline = asyncio.get_running_loop().time() + 20
            while asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.005)
                if not (sink.buffered or sink.in_flight or sink.repeats.pending or sink.ready.qsize()):
                    break
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            return sink

        sink = asyncio.run(scenario(receiver, messages))
        assert sink.buffered == 0 and sink.repeats.pending == 0, seed
        assert receiver.last == latest, seed
        stale_without_repeats += receiver.last_of_records != latest
        assert sink.repeats.latest.repeats <= len(messages) // 2, seed
    assert stale_without_repeats >= 6, "the workload must make the receiver apply older runs last"


class Recording:
    def __init__(self) -> None:
        self.sent: list[PendingEvent] = []

    async def send(self, event: PendingEvent) -> DeliveryResult:
        self.sent.append(event)
        return DELIVERED


def test_repeats_no_longer_latest_are_not_sent_and_a_clean_stop_posts_the_waiting_ones() -> None:
    transport = Recording()
    sink = Sink(SinkSettings(), transport, Committer(), Dlq())  # type: ignore[arg-type]
    sink.repeats.latest.enabled = True
    sink.on_assign(None, [_tp(0)])  # type: ignore[arg-type]
    old, new = terminal(0, 5), terminal(1, 10)
    for e in (old, new):
        sink.repeats.latest.sending(e)
        sink.repeats.latest.settled(e, delivered=True)  # new is the latest now
    outdated, current = replace(old, repeat=True), replace(new, repeat=True)
    sink.repeats.pending = 2
    assert sink._sendable([outdated, current]) == [current] and sink.repeats.pending == 1
    sink._keep_repeats([current, new])  # a stopping worker puts back only the repeat
    assert sink.ready.qsize() == 1
    sink._keep_repeats([outdated, current])  # one that waited behind a backlog, and the same again
    sink.repeats.pending += 2

    async def stop() -> None:
        await sink._flush_repeats(asyncio.get_running_loop().time() + 5)

    asyncio.run(stop())
    assert transport.sent == [current] and sink.ready.empty()  # each job's latest, once

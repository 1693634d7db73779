"""Transports: the file is flushed and fsynced before the offsets it covers are committed; console lines."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from olstream.connectors.sink.delivery import DELIVERED, DeliveryResult, Outcome, PendingEvent
from olstream.connectors.sink.settings import SinkSettings
from olstream.connectors.sink.sink import Sink
from olstream.connectors.sink.transports import ConsoleTransport, FileTransport, failed_events, one_line
from tests.support.fake_message import FakeMessage


class RecordingCommitter:
    """Stands in for the consumer's commit() and records the order of durable steps."""

    def __init__(self, steps: list[str]) -> None:
        self.steps = steps

    def commit(self, offsets: list[Any], asynchronous: bool) -> None:
        assert not asynchronous
        self.steps.append("commit " + ",".join(f"{tp.partition}:{tp.offset}" for tp in offsets))

    def position(self, partitions: list[Any]) -> list[Any]:
        return [SimpleNamespace(topic=p.topic, partition=p.partition, offset=-1001) for p in partitions]


def test_file_is_fsynced_before_the_offsets_it_covers_are_committed(tmp_path: Path) -> None:
    steps: list[str] = []
    path = tmp_path / "events.ndjson"

    def fsync(fd: int) -> None:
        steps.append(f"fsync ({path.stat().st_size} bytes on disk)")

    transport = FileTransport(str(path), fsync=fsync)
    settings = SinkSettings(transport="file", file_path=str(path))
    sink = Sink(settings, transport, RecordingCommitter(steps), None)  # type: ignore[arg-type]
    sink.on_assign(None, [_tp("t", 0)])  # type: ignore[arg-type]
    epoch = sink.epochs[("t", 0)]
    events = [PendingEvent("t", 0, n, b"k", json.dumps({"n": n}).encode(), epoch) for n in range(3)]

    async def deliver() -> None:
        await transport.start()
        for ev in events:
            sink.trackers[("t", 0)].add(ev.offset)
            sink.buffered += 1
            sink.queues.add(ev)
            assert await transport.send(ev) == DELIVERED
            sink._finish(ev)

    asyncio.run(deliver())
    assert sink.commit_finished()
    assert steps == ["fsync (27 bytes on disk)", "commit 0:3"]  # flushed, fsynced, then committed
    assert sink.commit_finished() and len(steps) == 2  # nothing new: neither fsync nor commit
    asyncio.run(transport.close())
    assert path.read_bytes().splitlines() == [e.value for e in events]


def test_revoked_partitions_are_committed_then_forgotten_and_never_committed_again(tmp_path: Path) -> None:
    steps: list[str] = []
    transport = FileTransport(str(tmp_path / "x"), fsync=lambda fd: steps.append("fsync"))
    sink = Sink(SinkSettings(transport="file"), transport, RecordingCommitter(steps), None)  # type: ignore[arg-type]
    sink.on_assign(None, [_tp("t", 0), _tp("t", 1)])  # type: ignore[arg-type]
    asyncio.run(transport.start())
    for p in (0, 1):
        for n in range(2):
            ev = PendingEvent("t", p, n, b"k", b"{}", sink.epochs[("t", p)])
            sink.trackers[("t", p)].add(n)
            sink.buffered += 1
            sink.queues.add(ev)
            if n == 0:
                asyncio.run(transport.send(ev))
                sink._finish(ev)
    stale = PendingEvent("t", 1, 1, b"k", b"{}", sink.epochs[("t", 1)])
    sink.on_revoke(None, [_tp("t", 1)])  # type: ignore[arg-type]
    assert steps == ["fsync", "commit 1:1"]  # only the revoked partition, only its finished prefix
    assert ("t", 1) not in sink.trackers and sink.buffered == 1
    assert sink._stale(stale)
    sink._settle(stale, DELIVERED, 0)  # an in-flight event of the revoked partition finishing late
    sink.commit_finished()
    assert steps == ["fsync", "commit 1:1", "commit 0:1"]
    asyncio.run(transport.close())


def test_console_prints_one_event_per_line() -> None:
    out = io.BytesIO()
    console = ConsoleTransport(out)
    pretty = json.dumps({"eventType": "START", "run": {"runId": "x"}}, indent=2).encode()
    compact = b'{"eventType":"COMPLETE"}'
    for n, body in enumerate((pretty, compact)):
        result = asyncio.run(console.send(PendingEvent("t", 0, n, None, body, 1)))
        assert result.outcome is Outcome.DELIVERED
    lines = out.getvalue().splitlines()
    assert lines == [one_line(pretty), compact]
    assert json.loads(lines[0]) == json.loads(pretty)


def test_a_multi_line_value_that_is_not_json_is_rejected_not_written(tmp_path: Path) -> None:
    transport = FileTransport(str(tmp_path / "x"))
    asyncio.run(transport.start())
    result = asyncio.run(transport.send(PendingEvent("t", 0, 0, None, b"not\njson", 1)))
    asyncio.run(transport.close())
    assert result.outcome is Outcome.REJECTED
    assert (tmp_path / "x").read_bytes() == b""


def _tp(topic: str, partition: int) -> Any:
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, partition)


def test_batch_answers_name_their_failed_events() -> None:
    assert failed_events(b"") == []
    assert failed_events(b'{"status": "success", "summary": {"received": 2}}') == []
    assert failed_events(b"<html>not json</html>") == []
    answer = {
        "status": "partial_success",
        "summary": {"received": 3, "successful": 1, "failed": 2},
        "failed_events": [{"index": 0, "reason": "Timeout", "retriable": True}, "junk", {"index": 2}],
    }
    assert failed_events(json.dumps(answer).encode()) == [
        {"index": 0, "reason": "Timeout", "retriable": True},
        {"index": 2},
    ]


class FlakyTransport:
    """Fails every third event once (retriable), answers after a short await, tracks keys in flight."""

    def __init__(self) -> None:
        self.in_flight: set[tuple[int, bytes]] = set()
        self.sent: list[PendingEvent] = []
        self.failed_once: set[int] = set()
        self.overlaps = 0
        self.peak = 0

    async def start(self) -> None: ...

    async def send(self, event: PendingEvent) -> DeliveryResult:
        assert event.key is not None
        key = (event.partition, event.key)
        if key in self.in_flight:
            self.overlaps += 1
        self.in_flight.add(key)
        self.peak = max(self.peak, len(self.in_flight))
        await asyncio.sleep(0.001 * (event.offset % 3))
        self.in_flight.discard(key)
        if event.offset % 3 == 0 and event.offset not in self.failed_once:
            self.failed_once.add(event.offset)
            return DeliveryResult(Outcome.RETRY, 503, "busy")
        self.sent.append(event)
        return DELIVERED

    def make_durable(self) -> None: ...

    async def close(self) -> None: ...


def test_workers_keep_per_key_order_through_retries_with_bounded_concurrency() -> None:
    steps: list[str] = []
    transport = FlakyTransport()
    settings = SinkSettings(concurrency=4, backoff_initial=0.001, backoff_max=0.005)

    async def scenario() -> Sink:
        sink = Sink(settings, transport, RecordingCommitter(steps), None)  # type: ignore[arg-type]
        sink.on_assign(None, [_tp("t", 0), _tp("t", 1)])  # type: ignore[arg-type]
        for offset in range(60):
            key = f"run:ns/job-{offset % 5}".encode()
            sink._admit(FakeMessage(offset % 2, offset, key=key, value=b"{}"))  # type: ignore[arg-type]
        workers = [asyncio.create_task(sink._worker()) for _ in range(settings.concurrency)]
        for _ in range(2000):
            if sink.buffered == 0:
                break
            await asyncio.sleep(0.002)
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        return sink

    sink = asyncio.run(scenario())
    assert sink.buffered == 0 and len(transport.sent) == 60
    assert transport.overlaps == 0 and 1 < transport.peak <= 4
    per_key: dict[tuple[int, bytes | None], list[int]] = {}
    for ev in transport.sent:
        per_key.setdefault((ev.partition, ev.key), []).append(ev.offset)
    assert all(offsets == sorted(offsets) for offsets in per_key.values())
    assert sink.commit_finished()
    assert sorted(steps[0].removeprefix("commit ").split(",")) == ["0:59", "1:60"]

"""The source's transactions (``--exactly-once``, ``connectors/source/run.py``): commit, abort, re-read.

The read-publish loop runs against the in-memory event log and a stand-in transactional producer
that keeps each transaction's messages apart until it commits: ``committed`` is what a
``read_committed`` consumer sees. Time is a fake clock: each read of the log takes 0.25 s and each
wait for the log 1 s, so transaction intervals and idleness are exact.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from olstream.connectors.source import run
from olstream.connectors.source.resume import position_of
from olstream.connectors.source.settings import SourceSettings
from olstream.connectors.source.tailer import TailerSettings
from olstream.contract import codec
from olstream.contract.placement import Placement, Scheme
from olstream.contract.records import RunEnded, RunStatus
from olstream.eventlog.store import StoredRow
from olstream.shared.errors import DeliveryError
from tests.support.memory_store import MemoryEventLogStore

TOPIC = "olstream.eventlog"
ERRORS = TOPIC + ".errors"
OFFSETS = TOPIC + ".offsets"
T = datetime(2026, 1, 2, tzinfo=UTC)
READ_SECONDS = 0.25
WAIT_SECONDS = 1.0


def abortable(reason: str = "transaction aborted by the broker") -> KafkaError:
    return KafkaError(KafkaError._STATE, reason, txn_requires_abort=True)


def retriable(reason: str = "coordinator not available") -> KafkaError:
    return KafkaError(KafkaError._TIMED_OUT, reason, retriable=True)


def fatal(reason: str = "producer fenced by a newer instance") -> KafkaError:
    return KafkaError(KafkaError._FENCED, reason, fatal=True)


# ---------------------------------------------------------------------------- fakes


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class TimedStore(MemoryEventLogStore):
    """The in-memory log, where a read takes READ_SECONDS and an empty wait WAIT_SECONDS of fake time."""

    def __init__(self, clock: Clock, partitions: int = 1) -> None:
        super().__init__(partitions)
        self.clock = clock
        self.after_read: Callable[[], None] = lambda: None

    def read(self, partition: int, after_offset: int, limit: int) -> list[StoredRow]:
        self.clock.now += READ_SECONDS
        rows = super().read(partition, after_offset, limit)
        self.after_read()
        return rows

    def wait_for_change(self, timeout: float) -> bool:
        self.clock.now += WAIT_SECONDS
        return False


def fill(store: MemoryEventLogStore, partition: int, count: int) -> None:
    """Append `count` good rows (RunEnded records that name their own position) to a partition."""

    def build(offset: int) -> bytes:
        return codec.encode(RunEnded(partition, offset, T, f"run-{partition}", RunStatus.COMPLETED, T))

    for _ in range(count):
        store.append(partition, build)


@dataclass(frozen=True)
class Sent:
    topic: str
    value: bytes
    _key: bytes
    headers: Any

    def key(self) -> bytes:
        return self._key

    @property
    def position(self) -> tuple[int, int] | None:
        return position_of(self.headers)


@dataclass
class TransactionalProducer:
    """Messages of the open transaction stay apart: `committed` gets them only when it commits.

    Scripted failures: `begin_errors`, `commit_errors`, `abort_errors` are raised (as KafkaException)
    by the next call of that kind (None: that call succeeds); `poll_errors` go to the error callback
    (the producer's error_cb) on the next poll, as librdkafka reports them.
    """

    committed: list[Sent] = field(default_factory=list)
    aborted: list[list[Sent]] = field(default_factory=list)
    transactions: list[list[Sent]] = field(default_factory=list)  # committed ones, each in order
    calls: list[str] = field(default_factory=list)
    begin_errors: list[KafkaError | None] = field(default_factory=list)
    commit_errors: list[KafkaError | None] = field(default_factory=list)
    abort_errors: list[KafkaError | None] = field(default_factory=list)
    poll_errors: list[KafkaError] = field(default_factory=list)
    error_cb: Callable[[KafkaError], None] | None = None
    on_commit: Callable[[], None] = lambda: None
    txn: list[Sent] | None = None
    _reports: list[tuple[Callable[[Any, Any], None] | None, Sent]] = field(default_factory=list)

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes,
        partition: int = -1,
        headers: Any = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
    ) -> None:
        if self.txn is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "produce outside a transaction"))
        msg = Sent(topic, value, key, headers)
        self.txn.append(msg)
        self._reports.append((on_delivery, msg))

    def _serve_reports(self) -> None:
        reports, self._reports = self._reports, []
        for callback, msg in reports:
            if callback is not None:
                callback(None, msg)

    def poll(self, timeout: float = 0) -> int:
        errors, self.poll_errors = self.poll_errors, []
        for err in errors:
            assert self.error_cb is not None
            self.error_cb(err)
        n = len(self._reports)
        self._serve_reports()
        return n

    def flush(self, timeout: float = 0) -> int:
        self._serve_reports()
        return 0

    def __len__(self) -> int:
        return len(self._reports)

    def _scripted(self, errors: list[KafkaError | None]) -> None:
        err = errors.pop(0) if errors else None
        if err is not None:
            raise KafkaException(err)

    def begin_transaction(self) -> None:
        self.calls.append("begin")
        self._scripted(self.begin_errors)
        assert self.txn is None, "a transaction is already open"
        self.txn = []

    def commit_transaction(self, timeout: float = -1) -> None:
        self.calls.append("commit")
        assert self.txn is not None, "no open transaction"
        self._serve_reports()  # commit_transaction flushes first
        self.on_commit()
        self._scripted(self.commit_errors)
        self.committed.extend(self.txn)
        self.transactions.append(self.txn)
        self.txn = None

    def abort_transaction(self, timeout: float = -1) -> None:
        self.calls.append("abort")
        self._scripted(self.abort_errors)
        assert self.txn is not None, "no open transaction"
        self.aborted.append(self.txn)
        self._reports.clear()  # purged
        self.txn = None

    # views of the committed output

    def records(self, topic: str = TOPIC) -> list[tuple[int, int]]:
        return positions(self.committed, topic)

    def checkpoints(self, messages: list[Sent] | None = None) -> dict[int, int]:
        out: dict[int, int] = {}
        for m in self.committed if messages is None else messages:
            if m.topic == OFFSETS:
                out[int(m.key())] = int(m.value)
        return out


class Source:
    """The source's loop (run._SourceLoop) on the fakes, as run_source builds it after its start-up."""

    loop: run._SourceLoop

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        *,
        partitions: int = 1,
        start: dict[int, int] | None = None,
        transaction_interval: float = 1.0,
        idle_seconds: float = 2.0,
        batch_size: int = 2,
    ) -> None:
        self.clock = Clock()
        monkeypatch.setattr(run, "time", SimpleNamespace(monotonic=self.clock.monotonic))
        self.store = TimedStore(self.clock, partitions)
        self.producer = TransactionalProducer()
        self.stop = threading.Event()
        self.settings = SourceSettings(
            log_url="memory:",
            topic=TOPIC,
            errors_topic=ERRORS,
            exactly_once=True,
            until_idle=True,
            idle_seconds=idle_seconds,
            transaction_interval=transaction_interval,
            tailer=TailerSettings(batch_size=batch_size, min_wait=0.001, max_wait=0.001, gap_grace=0.0),
        )
        self.start = dict(start or {})

    def run(self) -> int:
        loop = run._SourceLoop(
            self.settings,
            self.store,
            cast(Producer, self.producer),
            self.start,
            self.stop,
            Placement(Scheme.MODULO, 1),
        )
        self.producer.error_cb = loop.publisher.on_kafka_error  # what run_source's _ErrorForwarder does
        self.loop = loop
        return loop.run()


def positions(messages: list[Sent], topic: str) -> list[tuple[int, int]]:
    return [m.position for m in messages if m.topic == topic and m.position is not None]


def rows(partition: int, first: int, last: int) -> list[tuple[int, int]]:
    return [(partition, o) for o in range(first, last + 1)]


# ---------------------------------------------------------------------------- commits


def test_a_commit_publishes_records_error_records_and_the_checkpoint_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = Source(monkeypatch, partitions=2, batch_size=10)
    fill(source.store, 0, 3)
    source.store.append(1, lambda off: b"junk")  # a row that does not decode: the errors topic
    fill(source.store, 1, 2)
    assert source.run() == 0
    assert source.producer.calls == ["begin", "commit"]
    [txn] = source.producer.transactions
    assert [(m.topic, m.position) for m in txn] == [
        (TOPIC, (0, 0)),
        (TOPIC, (0, 1)),
        (TOPIC, (0, 2)),
        (TOPIC, (1, 0)),  # the error row's position marker (`wire.ROW_REJECTED`), then its copy
        (ERRORS, (1, 0)),
        (TOPIC, (1, 1)),
        (TOPIC, (1, 2)),
        (OFFSETS, (0, 2)),  # the position, in the same transaction, after the rows it covers
        (OFFSETS, (1, 2)),
    ]
    assert source.loop.publisher.acked == {0: 2, 1: 2}


def test_commits_happen_once_the_interval_has_passed_and_whenever_caught_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = Source(monkeypatch, transaction_interval=1.0, batch_size=2)
    fill(source.store, 0, 12)
    committed_at: list[float] = []
    source.producer.on_commit = lambda: committed_at.append(source.clock.now)
    assert source.run() == 0
    # reads of two rows at 0.25, 0.5, ... s: the transaction begun at 0.25 s commits after the
    # batch read at 1.25 s (1 s later); the next one (begun at 1.5 s) when the read at 1.75 s is empty
    assert committed_at == [1.25, 1.75]
    assert [[m.position for m in txn] for txn in source.producer.transactions] == [
        [*rows(0, 0, 9), (0, 9)],
        [*rows(0, 10, 11), (0, 11)],
    ]
    assert source.producer.calls == ["begin", "commit", "begin", "commit"]


def test_a_stop_commits_the_open_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = Source(monkeypatch, transaction_interval=100.0, batch_size=2)
    fill(source.store, 0, 10)
    reads = 0

    def stop_after_three_reads() -> None:
        nonlocal reads
        reads += 1
        if reads == 3:
            source.stop.set()

    source.store.after_read = stop_after_three_reads
    assert source.run() == 0
    assert source.producer.calls == ["begin", "commit"]
    assert source.producer.records() == rows(0, 0, 5)
    assert source.producer.checkpoints() == {0: 5}


# ---------------------------------------------------------------------------- aborts


@pytest.mark.parametrize(
    ("commit_errors", "calls"),
    [
        # the first transaction aborts: read again from the start position
        ([abortable()], ["begin", "commit", "abort", "begin", "commit", "begin", "commit"]),
        # the second one aborts: read again from the first one's end
        ([None, abortable()], ["begin", "commit", "begin", "commit", "abort", "begin", "commit"]),
    ],
    ids=["first-transaction", "later-transaction"],
)
def test_an_aborted_transaction_is_published_again_from_the_last_committed_position(
    monkeypatch: pytest.MonkeyPatch, commit_errors: list[KafkaError | None], calls: list[str]
) -> None:
    source = Source(monkeypatch, start={0: 1}, transaction_interval=1.0, batch_size=2)
    fill(source.store, 0, 14)  # rows 0 and 1 are already in Kafka (the start position)
    source.producer.commit_errors = commit_errors
    assert source.run() == 0
    assert source.producer.calls == calls
    [aborted] = source.producer.aborted
    assert positions(aborted, TOPIC)  # it did hold records ...
    assert source.producer.records() == rows(0, 2, 13)  # ... and the committed output has each once
    for txn in source.producer.transactions:  # every committed transaction carries its own checkpoint
        assert source.producer.checkpoints(txn) == {0: max(o for _, o in positions(txn, TOPIC))}
    assert source.loop.publisher.acked == {0: 13}


def test_the_checkpoint_of_an_aborted_transaction_is_written_again(monkeypatch: pytest.MonkeyPatch) -> None:
    source = Source(monkeypatch, transaction_interval=100.0, batch_size=10)
    fill(source.store, 0, 3)
    source.producer.commit_errors = [abortable()]
    assert source.run() == 0
    assert source.producer.calls == ["begin", "commit", "abort", "begin", "commit"]
    assert source.producer.checkpoints(source.producer.aborted[0]) == {0: 2}
    [txn] = source.producer.transactions
    assert [m.position for m in txn] == [*rows(0, 0, 2), (0, 2)]  # same position, written again


def test_a_retriable_commit_error_retries_the_same_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    source = Source(monkeypatch, batch_size=10)
    fill(source.store, 0, 4)
    source.producer.commit_errors = [retriable(), retriable()]
    assert source.run() == 0
    assert source.producer.calls == ["begin", "commit", "commit", "commit"]
    assert source.producer.aborted == []
    assert source.producer.records() == rows(0, 0, 3)


def test_an_abort_retries_while_kafka_is_away(monkeypatch: pytest.MonkeyPatch) -> None:
    source = Source(monkeypatch, batch_size=10)
    fill(source.store, 0, 2)
    source.producer.commit_errors = [abortable()]
    source.producer.abort_errors = [retriable()]
    assert source.run() == 0
    assert source.producer.calls == ["begin", "commit", "abort", "abort", "begin", "commit"]
    assert source.producer.records() == rows(0, 0, 1)


def test_until_idle_does_not_stop_before_an_aborted_transaction_is_published_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = Source(monkeypatch, batch_size=10, idle_seconds=2.0)
    fill(source.store, 0, 3)
    produce = source.producer.produce

    def slow_produce(*args: Any, **kwargs: Any) -> None:
        source.clock.now += 1.0  # Kafka is slow: the batch takes longer to hand over than idle_seconds
        produce(*args, **kwargs)

    monkeypatch.setattr(source.producer, "produce", slow_produce)
    source.producer.commit_errors = [abortable()]
    assert source.run() == 0
    assert source.producer.records() == rows(0, 0, 2)


# ---------------------------------------------------------------------------- fatal errors


def test_a_fatal_producer_error_stops_the_source_and_commits_nothing_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = Source(monkeypatch, transaction_interval=1.0, batch_size=2)
    fill(source.store, 0, 14)

    def fence_after_the_first_commit() -> None:
        if len(source.producer.calls) == 2:  # begin, commit: the error_cb fires on the next poll
            source.producer.poll_errors.append(fatal())

    source.producer.on_commit = fence_after_the_first_commit
    with pytest.raises(DeliveryError, match=r"the Kafka producer failed: .*fenced"):
        source.run()
    assert source.producer.calls == [
        "begin",
        "commit",
        "begin",
    ]  # the open one is neither committed nor aborted
    assert source.producer.records() == rows(0, 0, 9)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ({"begin_errors": [fatal()]}, "cannot begin a transaction .*did another connector"),
        ({"commit_errors": [fatal()]}, "cannot commit the transaction: .*fenced"),
        ({"commit_errors": [abortable()], "abort_errors": [fatal()]}, "cannot abort the transaction"),
    ],
    ids=["begin", "commit", "abort"],
)
def test_a_transaction_call_that_fails_for_good_stops_the_source(
    monkeypatch: pytest.MonkeyPatch, script: dict[str, list[KafkaError | None]], message: str
) -> None:
    source = Source(monkeypatch, batch_size=10)
    fill(source.store, 0, 3)
    for name, errors in script.items():
        setattr(source.producer, name, errors)
    with pytest.raises(DeliveryError, match=message):
        source.run()
    assert source.producer.committed == []

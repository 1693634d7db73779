"""Publisher bookkeeping with a stand-in producer: which messages ask for reports, what counts as acked."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from olstream.connectors.source.publisher import Publisher
from olstream.contract import codec
from olstream.contract.placement import Placement, Scheme
from olstream.contract.records import RunEnded, RunStatus
from olstream.eventlog.store import StoredRow

T = datetime(2026, 1, 2, tzinfo=UTC)
MODULO_2 = Placement(Scheme.MODULO, 2)


class FakeMessage:
    def __init__(
        self, topic: str, value: bytes, key: bytes, headers: list[tuple[str, bytes]], partition: int = -1
    ) -> None:
        self.topic, self.value, self._key, self.headers = topic, value, key, headers
        self.partition = partition  # -1: left to the partitioner

    def key(self) -> bytes:
        return self._key


class RecordingProducer:
    """Keeps produced messages; poll/flush 'deliver' them all successfully, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[FakeMessage, bool]] = []
        self._pending: list[tuple[FakeMessage, Callable[[Any, Any], None] | None]] = []

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes,
        partition: int = -1,
        headers: Any = None,
        on_delivery: Any = None,
    ) -> None:
        msg = FakeMessage(topic, value, key, headers, partition)
        self.sent.append((msg, on_delivery is not None))
        self._pending.append((msg, on_delivery))

    def poll(self, _timeout: float = 0) -> int:
        pending, self._pending = self._pending, []
        for msg, callback in pending:
            if callback is not None:
                callback(None, msg)
        return len(pending)

    def flush(self, _timeout: float = 0) -> int:
        self.poll()
        return 0

    def __len__(self) -> int:
        return len(self._pending)


def good(partition: int, offset: int) -> StoredRow:
    record = RunEnded(partition, offset, T, "run", RunStatus.COMPLETED, T)
    return StoredRow(partition, offset, codec.encode(record))


def test_only_the_last_row_of_each_partition_run_asks_for_a_report_and_counts_add_up() -> None:
    producer = RecordingProducer()
    publisher = Publisher(producer, "t", "t.errors", transactional=False, placement=MODULO_2)  # type: ignore[arg-type]
    rows = [good(0, 0), good(0, 1), good(0, 2), good(1, 0), good(1, 1), StoredRow(1, 2, b"junk"), good(1, 3)]
    assert publisher.publish(rows) == len(rows)
    publisher.flush()
    reports = [(m.topic, m.headers[1][1], wants) for m, wants in producer.sent]
    assert reports == [
        ("t", b"0", False),
        ("t", b"1", False),
        ("t", b"2", True),
        ("t", b"0", False),
        ("t", b"1", True),  # the row before a corrupt one is reported: the errors topic waits for it
        ("t", b"2", True),  # the corrupt row's position marker (`wire.ROW_REJECTED`), then its copy
        ("t.errors", b"2", True),
        ("t", b"3", True),
    ]
    assert publisher.published == 6
    assert publisher.errors == 1
    assert publisher.acked == {0: 2, 1: 3}
    placed = {(m.key(), m.partition) for m, _ in producer.sent if m.topic == "t"}
    assert placed == {(b"0", 0), (b"1", 1)}  # each record in its log partition's Kafka partition
    error = next(m for m, _ in producer.sent if m.topic == "t.errors")
    assert dict(error.headers)["olstream.error"].startswith(b"not Avro single-object encoding")
    assert error.key() == b"1" and error.value == b"junk"


def test_with_transactions_only_a_commit_moves_the_acked_positions() -> None:
    producer = RecordingProducer()
    publisher = Publisher(producer, "t", "t.errors", transactional=True, placement=MODULO_2)  # type: ignore[arg-type]
    publisher.set_acked({0: 4})
    publisher.publish([good(0, 5), good(0, 6)])
    publisher.flush()
    assert publisher.acked == {0: 4}
    publisher.set_acked({0: 6})
    assert publisher.acked == {0: 6}


def test_a_row_above_the_limit_goes_to_the_errors_topic_bounded_and_the_rest_goes_on() -> None:
    import hashlib

    from olstream.connectors.source.publisher import ERRORS
    from olstream.contract.records import RunError
    from olstream.shared import deadletter

    producer = RecordingProducer()
    limit = 100_000
    publisher = Publisher(
        producer,  # type: ignore[arg-type]
        "t",
        "t.errors",
        transactional=False,
        placement=MODULO_2,
        max_record_bytes=limit,
    )
    big_valid = RunEnded(0, 1, T, "run", RunStatus.FAILED, T, RunError("boom", "E", "x" * 2_000_000))
    big_junk = StoredRow(1, 0, b"\xc3\x01" + b"j" * 5_000_000)
    rows = [good(0, 0), StoredRow(0, 1, codec.encode(big_valid)), good(0, 2), big_junk, good(1, 1)]
    counted = ERRORS.labels(kind="too_large")._value.get()
    assert publisher.publish(rows) == len(rows)
    publisher.flush()
    assert [(m.topic, m.headers[1][1]) for m, _ in producer.sent] == [
        ("t", b"0"),
        ("t", b"1"),  # each error row leaves its position marker in the records topic first
        ("t.errors", b"1"),
        ("t", b"2"),
        ("t", b"0"),
        ("t.errors", b"0"),
        ("t", b"1"),
    ]
    assert publisher.published == 3 and publisher.errors == 2
    assert publisher.acked == {0: 2, 1: 1}
    assert ERRORS.labels(kind="too_large")._value.get() == counted + 2
    for m, row in zip(
        (m for m, _ in producer.sent if m.topic == "t.errors"), (rows[1], big_junk), strict=True
    ):
        h = dict(m.headers)
        assert h[deadletter.ERROR] == b"too_large"
        assert len(m.value) == deadletter.COPY_LIMIT and row.payload.startswith(m.value)
        assert h[deadletter.SIZE] == str(len(row.payload)).encode()
        assert h[deadletter.DIGEST] == hashlib.sha256(row.payload).hexdigest().encode()
        assert f"row of {len(row.payload)} bytes, above the limit {limit}" in str(h[deadletter.ERROR_DETAIL])


class FullEveryOtherTime(RecordingProducer):
    """librdkafka's queue is full on every other produce call, until a poll serves reports."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.polls = 0

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        if self.calls % 2:
            raise BufferError("Local: Queue full")
        super().produce(*args, **kwargs)

    def poll(self, _timeout: float = 0) -> int:
        self.polls += 1
        return super().poll(_timeout)


def test_a_full_queue_is_waited_out_and_every_message_is_produced_once_in_order() -> None:
    rows = [good(0, 0), good(0, 1), good(0, 2), good(1, 0), StoredRow(1, 1, b"junk"), good(1, 2)]
    sent = {}
    for producer in (RecordingProducer(), FullEveryOtherTime()):
        publisher = Publisher(
            producer, "t", "t.errors", transactional=False, placement=MODULO_2, offsets_topic="o"
        )  # type: ignore[arg-type]
        assert publisher.publish(rows) == len(rows)
        publisher.checkpoint({0: 2, 1: 2})
        publisher.flush()
        assert publisher.acked == {0: 2, 1: 2} and publisher.errors == 1
        sent[type(producer)] = [
            (m.topic, m.key(), m.headers, m.partition, wants) for m, wants in producer.sent
        ]
    full = FullEveryOtherTime
    assert sent[full] == sent[RecordingProducer] and len(sent[full]) == 9


def test_a_stop_asked_while_the_queue_is_full_leaves_the_rest_of_the_run_unproduced() -> None:
    class AlwaysFull(RecordingProducer):
        def produce(self, *args: Any, **kwargs: Any) -> None:
            if len(self.sent) >= 2:
                raise BufferError("Local: Queue full")
            super().produce(*args, **kwargs)

    producer = AlwaysFull()
    stops = iter([False, True])
    publisher = Publisher(
        producer, "t", "t.errors", transactional=False, placement=MODULO_2, should_stop=lambda: next(stops)
    )  # type: ignore[arg-type]
    assert publisher.publish([good(0, 0), good(0, 1), good(0, 2), good(0, 3)]) == 2
    assert publisher.produced == {0: 1} and len(producer.sent) == 2

"""Publisher bookkeeping with a stand-in producer: which messages ask for reports, what counts as acked."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from olstream.connectors.source.publisher import Publisher
from olstream.contract import codec
from olstream.contract.records import RunEnded, RunStatus
from olstream.eventlog.store import StoredRow

T = datetime(2026, 1, 2, tzinfo=UTC)


class FakeMessage:
    def __init__(self, topic: str, value: bytes, key: bytes, headers: list[tuple[str, bytes]]) -> None:
        self.topic, self.value, self._key, self.headers = topic, value, key, headers

    def key(self) -> bytes:
        return self._key


class RecordingProducer:
    """Keeps produced messages; poll/flush 'deliver' them all successfully, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[FakeMessage, bool]] = []
        self._pending: list[tuple[FakeMessage, Callable[[Any, Any], None] | None]] = []

    def produce(
        self, topic: str, value: bytes, key: bytes, headers: Any = None, on_delivery: Any = None
    ) -> None:
        msg = FakeMessage(topic, value, key, headers)
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
    publisher = Publisher(producer, "t", "t.errors", transactional=False)  # type: ignore[arg-type]
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
        ("t.errors", b"2", True),
        ("t", b"3", True),
    ]
    assert publisher.published == 6
    assert publisher.errors == 1
    assert publisher.acked == {0: 2, 1: 3}
    error = next(m for m, _ in producer.sent if m.topic == "t.errors")
    assert dict(error.headers)["olstream.error"].startswith(b"not Avro single-object encoding")
    assert error.key() == b"1" and error.value == b"junk"


def test_with_transactions_only_a_commit_moves_the_acked_positions() -> None:
    producer = RecordingProducer()
    publisher = Publisher(producer, "t", "t.errors", transactional=True)  # type: ignore[arg-type]
    publisher.set_acked({0: 4})
    publisher.publish([good(0, 5), good(0, 6)])
    publisher.flush()
    assert publisher.acked == {0: 4}
    publisher.set_acked({0: 6})
    assert publisher.acked == {0: 6}

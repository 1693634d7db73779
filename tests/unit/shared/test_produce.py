"""`olstream.shared.produce.produce`: a full librdkafka queue is waited out, or given up on request."""

from __future__ import annotations

from typing import Any

from olstream.shared.produce import ANY_PARTITION, produce


class FullThenRoom:
    """A producer whose queue is full for the first `full` calls."""

    def __init__(self, full: int) -> None:
        self.full = full
        self.calls: list[tuple[Any, ...]] = []
        self.polls: list[float] = []

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))
        if len(self.calls) <= self.full:
            raise BufferError("Local: Queue full")

    def poll(self, timeout: float) -> int:
        self.polls.append(timeout)
        return 0


def test_a_full_queue_is_polled_until_there_is_room() -> None:
    producer = FullThenRoom(full=2)
    assert produce(producer, "t", b"k", b"v", [("h", b"1")])  # type: ignore[arg-type]
    assert producer.polls == [0.05, 0.05]
    assert producer.calls == [(("t", b"v", b"k", ANY_PARTITION), {"headers": [("h", b"1")]})] * 3


def test_the_partition_and_delivery_callback_are_passed_on() -> None:
    producer = FullThenRoom(full=0)

    def delivered(_err: Any, _msg: Any) -> None: ...

    assert produce(producer, "t", None, b"v", None, 3, delivered)  # type: ignore[arg-type]
    assert producer.calls == [(("t", b"v", None, 3), {"on_delivery": delivered, "headers": None})]


def test_a_wait_that_says_stop_leaves_the_message_unqueued() -> None:
    producer = FullThenRoom(full=5)
    waits: list[int] = []

    def wait() -> bool:
        waits.append(1)
        return len(waits) < 2

    assert not produce(producer, "t", b"k", b"v", wait=wait)  # type: ignore[arg-type]
    assert len(waits) == 2 and len(producer.calls) == 2 and producer.polls == []

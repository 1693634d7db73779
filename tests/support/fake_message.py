"""A consumed confluent-kafka `Message` over plain values, for unit tests of code that reads one."""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import KafkaError

Headers = list[tuple[str, bytes]]

TIMESTAMP_CREATE_TIME = 1  # confluent_kafka.TIMESTAMP_CREATE_TIME: the producer's time


class FakeMessage:
    """What confluent-kafka's `Message` answers, over the values it is given: `error()` is None unless
    an error is given, `headers()` None unless headers are given (a copy of them as a list)."""

    def __init__(
        self,
        partition: int,
        offset: int,
        *,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        timestamp_ms: int = 0,
        topic: str = "t",
        error: KafkaError | None = None,
    ) -> None:
        self._partition, self._offset = partition, offset
        self._key, self._value = key, value
        self._headers = None if headers is None else list(headers)
        self._timestamp_ms, self._topic, self._error = timestamp_ms, topic, error

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> Headers | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_CREATE_TIME, self._timestamp_ms

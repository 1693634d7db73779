"""The run-state table's changelog, written with librdkafka: the checkpoint's third step.

faust restores a partition's RocksDB store from the table's changelog topic; the worker writes that
topic itself, as faust's own table write would (the same topic, key and raw value, a delete as a
tombstone, in the partition of the event that changed the key), but with a confluent-kafka producer
instead of faust's aiokafka one: faust's producer is pure Python and sends on the worker's event
loop, while librdkafka sends from its own threads (what that saved is in docs/benchmarks.md).

`flush` answers, per changelog partition written, the offset after its highest acknowledged write:
the run store (``olstream.streams.runtime.run_store``) keeps it with the batch's state, and a
restart restores the changelog only past it. Under exactly_once the changelog writes go into the
worker's transaction instead (``olstream.streams.runtime.transactions``).
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Message

from olstream.shared.kafka_clients import Kafka
from olstream.streams.runtime.sender import Sender


class ChangelogWriter:
    """Writes run-state changes to the table's changelog; `flush` waits until every write is acknowledged."""

    def __init__(self, kafka: Kafka, topic: str, extra: dict[str, Any] | None = None) -> None:
        self.topic = topic
        self._acknowledged: dict[int, int] = {}  # changelog partition -> highest acknowledged offset
        self._sender = Sender(
            kafka,
            {"linger.ms": 5, **(extra or {})},  # the checkpoint flushes at once after its writes
            names=(f"a changelog write to {topic}", f"changelog writes to {topic}"),
            on_acknowledged=self._acknowledge,
        )

    def _acknowledge(self, msg: Message) -> None:
        partition, offset = msg.partition(), msg.offset()
        if partition is not None and offset is not None and offset > self._acknowledged.get(partition, -1):
            self._acknowledged[partition] = offset

    def send(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Queue the write of `key` (a tombstone when `value` is None) to changelog `partition`."""
        self._sender.send(self.topic, key, value, partition=partition)

    async def flush(self, timeout: float = 60.0) -> dict[int, int]:
        """Wait (off the event loop) until every write so far is acknowledged; per changelog partition
        written since the last flush, the offset after its highest acknowledged write. DeliveryError
        when a write failed or is not acknowledged in time."""
        await self._sender.flush(timeout)
        acknowledged, self._acknowledged = self._acknowledged, {}
        return {partition: offset + 1 for partition, offset in acknowledged.items()}

    def close(self) -> None:
        self._sender.close()

"""The run-state table's changelog, written with librdkafka: the checkpoint's third step.

faust restores a partition's RocksDB store from the table's changelog topic; the worker writes that
topic itself, as faust's own table write would (the same topic, key and raw value, a delete as a
tombstone, in the partition of the event that changed the key), but with a confluent-kafka producer
instead of faust's aiokafka one. faust's producer is pure Python: on a batch of a few thousand state
writes it cost about a tenth of the worker's event loop and a flush of 30-90 ms per checkpoint
(bench/stream.py); librdkafka sends them from its own threads.

faust records, per store partition, the last changelog offset the local RocksDB store holds
(``Store.set_persisted_offset``, its public store API), and a restart reads the changelog only past
it. faust sets it from each write's acknowledgement; the writer sets it once per partition after a
flush, to the highest acknowledged offset: by then RocksDB holds every write at or below it (the
store is written when the changelog write is queued).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from faust.types import TP

from olstream.shared.errors import DeliveryError
from olstream.shared.kafka_clients import Kafka, producer_config

log = logging.getLogger(__name__)


class ChangelogWriter:
    """Writes run-state changes to the table's changelog; `flush` waits until every write is acknowledged."""

    def __init__(self, kafka: Kafka, topic: str, store: Any, extra: dict[str, Any] | None = None) -> None:
        self.topic = topic
        self.store = store  # faust's table store (table.data): set_persisted_offset(tp, offset)
        self._failure: KafkaError | None = None
        self._acknowledged: dict[int, int] = {}  # changelog partition -> highest acknowledged offset
        self._producer = Producer(
            producer_config(
                kafka,
                {
                    "linger.ms": 5,  # the checkpoint flushes at once after its writes
                    "batch.num.messages": 10_000,
                    "queue.buffering.max.messages": 500_000,
                    "on_delivery": self._delivered,
                    **(extra or {}),
                },
            )
        )

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            if self._failure is None:
                self._failure = err
            return
        partition, offset = msg.partition(), msg.offset()
        if partition is not None and offset is not None and offset > self._acknowledged.get(partition, -1):
            self._acknowledged[partition] = offset

    def send(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Queue the write of `key` (a tombstone when `value` is None) to changelog `partition`."""
        while True:
            try:
                self._producer.produce(self.topic, value, key, partition=partition)
                return
            except BufferError:
                self._producer.poll(0.05)

    def _flush(self, timeout: float) -> None:
        remaining = self._producer.flush(timeout)
        if self._failure is not None:
            raise DeliveryError(f"a changelog write to {self.topic} failed: {self._failure}")
        if remaining:
            raise DeliveryError(
                f"{remaining} changelog writes to {self.topic} not acknowledged within {timeout:.0f} s"
            )

    async def flush(self, timeout: float = 60.0) -> None:
        """Wait (off the event loop) until every write so far is acknowledged, then record each
        partition's highest acknowledged offset as its store's persisted offset; DeliveryError when a
        write failed or is not acknowledged in time."""
        if len(self._producer) or self._failure is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._flush, timeout)
        else:
            self._producer.poll(0)
        acknowledged, self._acknowledged = self._acknowledged, {}
        for partition, offset in acknowledged.items():
            self.store.set_persisted_offset(TP(self.topic, partition), offset)

    def close(self) -> None:
        self._producer.flush(10)

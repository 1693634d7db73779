"""Output sends with confluent-kafka (librdkafka): produced during a batch, flushed by its checkpoint.

The checkpoint (``olstream.streams.runtime.checkpoint``) stores a batch's state and commits its
input only after ``flush()`` saw every send of the batch acknowledged (``acks=all``, idempotent
producer). Keys are partitioned with murmur2, like the Java client and the OpenLineage Kafka
transport, so a run tree's events share one partition. The changelog writer
(``olstream.streams.runtime.changelog``) sends through a Sender of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import KafkaError, Message, Producer

from olstream.shared.errors import DeliveryError
from olstream.shared.kafka_clients import Kafka, producer_config
from olstream.shared.produce import produce

log = logging.getLogger(__name__)

Headers = list[tuple[str, str | bytes | None]]


class EventSends(Protocol):
    """Where a record's events and error records go: a `Sender`, or under exactly_once the record's
    input partition's transaction (`olstream.streams.runtime.transactions.PartitionTransactions`)."""

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None: ...


class Sender:
    """Sends whose first failure is kept and raised by the next `flush` (DeliveryError).

    `names` says what a send is in those errors (one, several). `on_acknowledged`, when given, is
    called with every acknowledged message; without it only failures call back into Python, not
    every acknowledged send (``flush()`` still waits for every message;
    tests/integration/streams/test_sender.py).
    """

    def __init__(
        self,
        kafka: Kafka,
        extra: dict[str, Any] | None = None,
        *,
        names: tuple[str, str] = ("an output send", "output sends"),
        on_acknowledged: Callable[[Message], None] | None = None,
    ) -> None:
        config = producer_config(
            kafka,
            {
                "linger.ms": 50,  # flush() sends at once; a long linger spares a wake-up per produce
                "batch.num.messages": 10_000,
                "queue.buffering.max.messages": 500_000,
                "partitioner": "murmur2_random",
                "delivery.report.only.error": on_acknowledged is None,
                "on_delivery": self._delivered,
                **(extra or {}),
            },
        )
        self._names = names
        self._on_acknowledged = on_acknowledged
        self._failure: KafkaError | None = None
        self._producer = Producer(config)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            if self._failure is None:
                self._failure = err
        elif self._on_acknowledged is not None:
            self._on_acknowledged(msg)

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None:
        produce(self._producer, topic, key, value, headers, partition)

    def _flush(self, timeout: float) -> None:
        remaining = self._producer.flush(timeout)
        one, several = self._names
        if self._failure is not None:
            raise DeliveryError(f"{one} failed: {self._failure}")
        if remaining:
            raise DeliveryError(f"{remaining} {several} not acknowledged within {timeout:.0f} s")

    async def flush(self, timeout: float = 60.0) -> None:
        """Wait (off the event loop) until every send so far is acknowledged; DeliveryError otherwise."""
        if len(self._producer) == 0 and self._failure is None:
            self._producer.poll(0)
            return
        await asyncio.get_running_loop().run_in_executor(None, self._flush, timeout)

    def close(self) -> None:
        self._producer.flush(10)

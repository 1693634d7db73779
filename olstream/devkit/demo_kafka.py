"""Broker-side observers of `olstream demo`: end offsets, a group's committed position, a read-only tail."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from olstream.shared import deadletter
from olstream.shared.errors import InfrastructureError
from olstream.shared.kafka_clients import client_config, consumer_config

_LATEST = OffsetSpec.latest()  # type: ignore[no-untyped-call]

log = logging.getLogger(__name__)


class OffsetWatcher:
    def __init__(self, bootstrap: str, timeout: float = 5.0) -> None:
        # The demo's own clients stay quiet: their failures surface as exceptions, not librdkafka lines.
        self.admin = AdminClient(client_config(bootstrap, {"log_level": 0}))
        self.timeout = timeout

    def ends(self, topic: str) -> dict[int, int]:
        """Partition -> end offset; {} when the topic does not exist (yet)."""
        try:
            meta = self.admin.list_topics(topic=topic, timeout=self.timeout)
            t = meta.topics.get(topic)
            if t is None or t.error is not None or not t.partitions:
                return {}
            request = {TopicPartition(topic, p): _LATEST for p in t.partitions}
            result = self.admin.list_offsets(request, request_timeout=self.timeout)
            return {tp.partition: fut.result().offset for tp, fut in result.items()}
        except KafkaException as e:
            log.debug("cannot read end offsets of %s: %s", topic, e)
            return {}

    def wait_ready(self, topic: str, timeout: float = 30.0) -> None:
        """Block until every partition has a leader that answers an offsets request."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                t = self.admin.list_topics(topic=topic, timeout=self.timeout).topics.get(topic)
                ok = t is not None and t.error is None and bool(t.partitions)
                if t is not None and ok and all(p.leader >= 0 for p in t.partitions.values()):
                    request = {TopicPartition(topic, p): _LATEST for p in t.partitions}
                    for fut in self.admin.list_offsets(request, request_timeout=self.timeout).values():
                        fut.result()
                    return
            except KafkaException as e:
                log.debug("topic %s not ready: %s", topic, e)
            time.sleep(0.2)
        raise InfrastructureError(f"topic {topic} has no leader for every partition after {timeout:.0f}s")

    def end_total(self, topic: str) -> int:
        return sum(self.ends(topic).values())

    def group_position(self, group: str, topic: str) -> tuple[int, int]:
        """(sum of the group's committed offsets on topic, sum of the topic's end offsets)."""
        ends = self.ends(topic)
        try:
            req = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in ends])]
            result = self.admin.list_consumer_group_offsets(req, request_timeout=self.timeout)
            committed = 0
            for fut in result.values():
                for tp in fut.result().topic_partitions or []:
                    committed += max(0, tp.offset)
        except KafkaException as e:
            log.debug("cannot read offsets of group %s: %s", group, e)
            committed = 0
        return committed, sum(ends.values())


def warm_up_group_coordinator(bootstrap: str, topic: str, group: str, timeout: float = 60.0) -> None:
    """Commit one offset so a fresh broker creates and loads its offsets topic before the workers start.

    (On a broker that just started, the first group joins meet "coordinator load in progress".)"""
    consumer = Consumer(consumer_config(bootstrap, group, {"log_level": 0}))
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
                return
            except KafkaException as e:
                if time.monotonic() > deadline:
                    raise InfrastructureError(f"the broker's group coordinator is not ready: {e}") from e
                time.sleep(0.5)
    finally:
        consumer.close()


class TopicFollower:
    """Reads a topic from the beginning without committing (it never disturbs the pipeline's groups)."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.consumer = Consumer(
            consumer_config(
                bootstrap,
                group,
                {"auto.offset.reset": "earliest", "enable.partition.eof": False, "log_level": 0},
            )
        )
        self.consumer.subscribe([topic])

    def poll(self, max_messages: int = 2000, timeout: float = 0.2) -> list[bytes]:
        values: list[bytes] = []
        for msg in self.consumer.consume(max_messages, timeout):
            err = msg.error()
            if err is not None:
                log.debug("observer: %s", err)
                continue
            value = msg.value()
            if value:
                values.append(value)
        return values

    def close(self) -> None:
        self.consumer.close()


@dataclass(frozen=True, slots=True)
class Rejections:
    """What the sink dead-lettered: per receiver status, the count and the first response's excerpt."""

    by_status: dict[str, tuple[int, str]]

    @property
    def total(self) -> int:
        return sum(n for n, _ in self.by_status.values())


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value or ""


def read_rejections(bootstrap: str, topic: str, timeout: float = 30.0) -> Rejections:
    """Every message of the sink's dead-letter `topic`, by its `olstream.status` header."""
    ends = OffsetWatcher(bootstrap).ends(topic)
    remaining = {p: end for p, end in ends.items() if end > 0}
    by_status: dict[str, tuple[int, str]] = {}
    if not remaining:
        return Rejections(by_status)
    consumer = Consumer(consumer_config(bootstrap, "olstream-demo-dlq-reader", {"log_level": 0}))
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in remaining])
        deadline = time.monotonic() + timeout
        while remaining and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            headers = {str(h[0]): _text(h[1]) for h in msg.headers() or []}
            status = headers.get(deadletter.HTTP_STATUS) or "(no status)"
            reason = headers.get(deadletter.HTTP_RESPONSE, "")
            count, first = by_status.get(status, (0, reason))
            by_status[status] = (count + 1, first)
            partition, offset = msg.partition(), msg.offset()
            if partition is not None and offset is not None and offset + 1 >= remaining.get(partition, 0):
                remaining.pop(partition, None)
    finally:
        consumer.close()
    if remaining:
        raise InfrastructureError(
            f"could not read the dead-letter topic {topic} to its end in {timeout:.0f}s "
            f"(partitions {sorted(remaining)} left): the rejection count would be incomplete"
        )
    return Rejections(by_status)

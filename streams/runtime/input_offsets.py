"""The input's offsets as the broker has them, asked with confluent-kafka off the event loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from olstream.shared.kafka_clients import Kafka, consumer_config


class InputOffsets:
    """Offsets of the input's partitions as the broker has them, queried off the event loop with
    confluent-kafka: low/high watermarks (``--until-idle``) and the group's committed offsets.

    The committed offsets gate evictions (see ``olstream.streams.retention``): faust's own bookkeeping
    can run ahead of the broker around rebalances, and no eviction may trust a commit that did
    not happen. The consumer never subscribes, so it does not join the group.
    """

    def __init__(self, kafka: Kafka, group: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        config = consumer_config(kafka, group)
        self._config = config
        self._consumer = Consumer(config)
        # reads single records by assignment (never subscribes or commits); faust reads the input
        # uncommitted, and so does this
        self._probe_lock = threading.Lock()
        self._probe = Consumer(
            {
                **config,
                "isolation.level": "read_uncommitted",
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
            }
        )

    def _watermarks(self, partitions: list[int]) -> dict[int, tuple[int, int]]:
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        out = {}
        for p in partitions:
            tp = TopicPartition(self.topic, p)
            try:
                low, high = self._consumer.get_watermark_offsets(tp, timeout=10)
            except KafkaException as e:
                if e.args[0].code() != KafkaError._TIMED_OUT:
                    raise
                # the leader it asked may be a broker that died: a new client reads fresh metadata
                fresh = Consumer(self._config)
                try:
                    low, high = fresh.get_watermark_offsets(tp, timeout=10)
                finally:
                    fresh.close()
            out[p] = (low, high)
        return out

    def _committed(self, partitions: list[int]) -> dict[int, int]:
        from confluent_kafka import KafkaException, TopicPartition

        tps = self._consumer.committed([TopicPartition(self.topic, p) for p in partitions], timeout=10)
        for tp in tps:
            if tp.error is not None:  # never read as "not committed": that would move a commit back
                raise KafkaException(tp.error)
        return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}

    def _first_offset_from(self, partition: int, offset: int) -> int | None:
        from confluent_kafka import KafkaError, TopicPartition

        with self._probe_lock:  # one assignment at a time: the agent and the idle timer both ask
            self._probe.assign([TopicPartition(self.topic, partition, offset)])
            try:
                for msg in self._probe.consume(1, timeout=5.0):
                    err, found = msg.error(), msg.offset()
                    if msg.partition() != partition or found is None:
                        continue
                    if err is None or err.code() == KafkaError._PARTITION_EOF:
                        return int(found)
                return None
            finally:
                self._probe.unassign()

    async def first_offset_from(self, partition: int, offset: int) -> int | None:
        """The offset of the first record at or after `offset`, or the partition's end offset when
        there is none (None: nothing could be read in 5 s)."""
        return await asyncio.get_running_loop().run_in_executor(
            None, self._first_offset_from, partition, offset
        )

    async def bounds(self, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """Low and high watermark of each partition, as a read_committed reader sees them (the high one
        is the last stable offset: an open transaction's records lie above it)."""
        return await asyncio.get_running_loop().run_in_executor(None, self._watermarks, partitions)

    def group_metadata(self) -> Any:
        """confluent-kafka's own group metadata of this never-subscribed consumer (generation -1, no
        member id): the reference the worker's hand-built metadata is checked against at start
        (``group_member.check_metadata_format``); offsets are sent with faust's member's instead."""
        return self._consumer.consumer_group_metadata()

    async def committed(self, partitions: list[int]) -> dict[int, int]:
        """The group's committed offset (next offset to read) of each partition that has one."""
        return await asyncio.get_running_loop().run_in_executor(None, self._committed, partitions)

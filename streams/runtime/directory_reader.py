"""Reads the whole records topic into the worker's run directory (``olstream.streams.run_directory``).

Every replica reads every partition of its input topic from the beginning, beside faust's consumer
(its own confluent-kafka consumer: assigned, never subscribed, never committing; read_committed, so
only what the source committed counts). It reads headers only, and keeps the bytes of each
``RunStarted``. Its progress depends on the records topic alone, never on what the worker does with
its own partitions, so a child waiting for it cannot hold it back: nothing waits in a circle.

A thread fetches; the event loop registers the batches (`RunDirectory.add`) and wakes the children
that wait (`wait_covered`). After a restart or a rebalance it is the same directory: it is rebuilt
from the topic on every start (the cost is in docs/worker.md).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from olstream.contract import wire
from olstream.shared.kafka_clients import Kafka, consumer_config
from olstream.streams.run_directory import Heads, Position, RunDirectory, start_position
from olstream.streams.runtime import app as m

log = logging.getLogger(__name__)

_RUN_STARTED = b"RunStarted"
_FETCH = 2000  # messages per fetch
_IN_FLIGHT = 4  # fetched batches the event loop has not registered yet, at most


def read_position(msg: Any) -> Position | None:
    """A records-topic message as the directory keeps it; None without a log position. Only a
    RunStarted's value is read (copied out of librdkafka's buffer)."""
    partition = offset = None
    kind = heads_raw = None
    for name, raw in msg.headers() or ():
        if name == wire.HEADER_PARTITION:
            partition = raw
        elif name == wire.HEADER_OFFSET:
            offset = raw
        elif name == wire.HEADER_TYPE:
            kind = raw
        elif name == wire.HEADER_HEADS:
            heads_raw = raw
    if partition is None or offset is None:
        return None
    try:
        p, o = int(partition), int(offset)
    except ValueError:
        return None
    if kind != _RUN_STARTED:
        return Position(p, o)
    value = msg.value()
    if not value:
        return Position(p, o)
    return start_position(p, o, value, heads_raw if isinstance(heads_raw, bytes) else None)


class DirectoryReader:
    """The thread that fills the directory from the records topic, and the waits on it."""

    def __init__(
        self, kafka: Kafka, group: str, topic: str, partitions: int, directory: RunDirectory
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partitions = partitions
        self._config = consumer_config(
            kafka,
            f"{group}.directory",
            {"isolation.level": "read_committed", "fetch.wait.max.ms": 20, "enable.partition.eof": False},
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._progress = asyncio.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._room = threading.BoundedSemaphore(_IN_FLIGHT)
        self.newest_ms = 0  # the newest message timestamp read (the records topic's time)

    def start(self) -> None:
        """Start reading (from the event loop that will wait on it)."""
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._progress = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="olstream-run-directory", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop reading and wait for the thread (its consumer closed) before the interpreter exits:
        a thread still inside librdkafka while Python finalizes can take the process down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    async def wait_covered(self, heads: Heads) -> None:
        """Return once the directory has read every log partition up to `heads`."""
        while not self.directory.covers(heads):
            event = self._progress
            await event.wait()

    def _registered(self, positions: list[Position], newest_ms: int) -> None:
        self._room.release()
        self.directory.add(positions)
        if newest_ms > self.newest_ms:
            self.newest_ms = newest_ms
        m.DIRECTORY_STARTS.set(self.directory.entries)
        event, self._progress = self._progress, asyncio.Event()
        event.set()

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

        consumer = Consumer(self._config)
        try:
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
            log.info(
                "run directory: reading %d partitions of %s from the beginning", self.partitions, self.topic
            )
            loop = self._loop
            assert loop is not None
            while not self._stop.is_set():
                try:
                    messages = consumer.consume(_FETCH, 0.1)
                except KafkaException as e:
                    log.warning("run directory: reading %s failed (reading on): %s", self.topic, e)
                    time.sleep(0.5)
                    continue
                positions: list[Position] = []
                append = positions.append
                for msg in messages:
                    if msg.error() is None:
                        pos = read_position(msg)
                        if pos is not None:
                            append(pos)
                newest = max((m.timestamp()[1] for m in messages[-8:]), default=0)  # about the newest
                if positions:
                    while not self._room.acquire(timeout=0.5):
                        if self._stop.is_set():
                            return
                    try:
                        loop.call_soon_threadsafe(self._registered, positions, newest)
                    except RuntimeError:  # the loop closed: the worker is stopping
                        return
        finally:
            consumer.close()

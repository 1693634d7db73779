"""Reads the whole records topic into the worker's run directory (``olstream.streams.run_directory``).

Every replica reads every partition of its input topic from the beginning, beside faust's consumer
(its own confluent-kafka consumer: assigned, never subscribed, never committing; read_committed, so
only what the source committed counts). It reads headers only, and keeps the bytes of each
``RunStarted``. Its progress depends on the records topic alone, never on what the worker does with
its own partitions, so a child waiting for it cannot hold it back: nothing waits in a circle.

A thread fetches; the event loop registers the batches (`RunDirectory.add`) and wakes the children
that wait (`wait_covered`). A rebalance does not touch it. A restart on the same data dir goes on
from where the directory stopped (`open_kept`): it reads only the topic's tail. The directory holds
what the topic holds: the starts the topic's retention deleted are evicted (`EVICT_SECONDS`), so a
kept directory answers as one rebuilt from the topic would (docs/worker.md, "The run directory").
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

from olstream.contract import wire
from olstream.shared.kafka_admin import retrying, topic_identity, topic_retention_ms
from olstream.shared.kafka_clients import Kafka, consumer_config
from olstream.streams.framed_input import InputFraming
from olstream.streams.run_directory import Heads, Position, Progress, RunDirectory, start_position
from olstream.streams.runtime.disk_run_starts import DiskRunStarts
from olstream.streams.runtime.metrics import DIRECTORY_STARTS
from olstream.streams.settings import WorkerSettings

log = logging.getLogger(__name__)

_RUN_STARTED = b"RunStarted"
_FETCH = 2000  # messages per fetch
_IN_FLIGHT = 4  # fetched batches the event loop has not registered yet, at most
EVICT_SECONDS = 600.0  # how often the starts the records topic no longer holds are evicted
WATERMARK_TIMEOUT_SECONDS = 60.0


def watermarks(consumer: Any, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """Each partition's (low, high) watermark, asked again while a leader moves."""
    from confluent_kafka import TopicPartition

    return {
        p: retrying(
            partial(consumer.get_watermark_offsets, TopicPartition(topic, p), timeout=10),
            f"reading the offsets of {topic}[{p}]",
            WATERMARK_TIMEOUT_SECONDS,
        )
        for p in range(partitions)
    }


def kept_directory(settings: WorkerSettings, partitions: int) -> tuple[DiskRunStarts, RunDirectory]:
    """The worker's run directory, on disk under its data dir (one per records topic), with what it
    kept from before a restart (`open_kept`)."""
    topic = settings.input_topic
    starts = DiskRunStarts(Path(settings.data_dir) / "run-directory" / topic)
    kept = open_kept(settings.connection, topic, partitions, starts, settings.parent_retention_ms)
    return starts, RunDirectory(settings.parent_retention_ms, starts, kept)


def open_kept(
    kafka: Kafka, topic: str, partitions: int, starts: DiskRunStarts, parent_retention_ms: int
) -> Progress:
    """What a kept directory has read of `topic`, once it is known to be a copy of this very topic on
    this cluster (its ids), short of its end; otherwise the copy is wiped and the directory is read
    from the beginning. Warns when the topic keeps records for less than `parent_retention_ms`."""
    from confluent_kafka import Consumer

    identity = topic_identity(kafka, topic)
    consumer = Consumer(consumer_config(kafka, "olstream.directory-watermarks"))
    try:
        ends = watermarks(consumer, topic, partitions)
    finally:
        consumer.close()
    kept = starts.progress
    past = {p: o for p, o in kept.read_to.items() if o > ends.get(p, (0, 0))[1]}
    if starts.identity != identity or past:
        if starts.identity is not None:
            log.warning(
                "run directory: the copy in %s belongs to %s (read up to %s past the ends of %s), "
                "not to %s: rebuilt from the topic",
                starts.path,
                starts.identity,
                past or "nothing",
                topic,
                identity,
            )
        starts.reset(identity)
        kept = Progress({}, {}, 0)
    evicted = starts.evict_below({p: low for p, (low, _) in ends.items()})
    if evicted:
        log.info(
            "run directory: %d starts evicted (the records topic %s no longer holds them)", evicted, topic
        )
        kept = Progress(kept.read_to, kept.seen, kept.entries - evicted)
    retention = topic_retention_ms(kafka, topic)
    if retention is not None and 0 <= retention < parent_retention_ms:
        log.warning(
            "the records topic %s keeps records for %.1f days (retention.ms), less than "
            "--parent-retention (%.1f days): a parent older than the topic's retention is no longer "
            'found by its children (docs/worker.md, "The run directory")',
            topic,
            retention / 86_400_000,
            parent_retention_ms / 86_400_000,
        )
    return kept


def read_position(msg: Any, framing: InputFraming) -> Position | None:
    """A records-topic message as the directory keeps it; None without a log position. Only a
    RunStarted's value is read (copied out of librdkafka's buffer), in either wire format (`framing`)."""
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
    where = f"{msg.topic()} partition {msg.partition()} offset {msg.offset()}"
    value = framing.single_object_or_exit(
        msg.value(), where
    )  # a confluent-framed one as its single-object bytes
    if not value:
        return Position(p, o)
    heads = heads_raw if isinstance(heads_raw, bytes) else None
    return start_position(p, o, value, heads, (msg.partition(), msg.offset()))


class DirectoryReader:
    """The thread that fills the directory from the records topic, and the waits on it."""

    def __init__(
        self,
        kafka: Kafka,
        group: str,
        topic: str,
        partitions: int,
        directory: RunDirectory,
        framing: InputFraming,
    ) -> None:
        self.directory = directory
        self.framing = framing
        self.topic = topic
        self.partitions = partitions
        self._config = consumer_config(
            kafka,
            f"{group}.directory",
            {
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 20,
                "enable.partition.eof": False,
                "auto.offset.reset": "earliest",  # a kept offset the retention deleted: its first one
            },
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._progress = asyncio.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._room = threading.BoundedSemaphore(_IN_FLIGHT)
        self.newest_ms = 0  # the newest message timestamp read (the records topic's time)
        self._start_at: dict[int, int] = {}

    def start(self) -> None:
        """Start reading (from the event loop that will wait on it)."""
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._start_at = dict(self.directory.read_to)  # what a kept directory read before
        self._progress = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="olstream-run-directory", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 10.0) -> bool:
        """Stop reading and wait for the thread (its consumer closed) before the interpreter exits:
        a thread still inside librdkafka while Python finalizes can take the process down. True
        once the thread has ended."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    async def wait_covered(self, heads: Heads) -> None:
        """Return once the directory has read every log partition up to `heads`."""
        while not self.directory.covers(heads):
            event = self._progress
            await event.wait()

    def _registered(self, positions: list[Position], newest_ms: int, read_to: dict[int, int]) -> None:
        self._room.release()
        self.directory.add(positions, read_to)
        if newest_ms > self.newest_ms:
            self.newest_ms = newest_ms
        DIRECTORY_STARTS.set(self.directory.entries)
        event, self._progress = self._progress, asyncio.Event()
        event.set()

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

        consumer = Consumer(self._config)
        try:
            start_at = self._start_at
            consumer.assign(
                [
                    TopicPartition(self.topic, p, start_at.get(p, OFFSET_BEGINNING))
                    for p in range(self.partitions)
                ]
            )
            catch_up = CatchUp(self.topic, watermarks(consumer, self.topic, self.partitions), start_at)
            loop = self._loop
            assert loop is not None
            evicted_at = time.monotonic()
            while not self._stop.is_set():
                try:
                    messages = consumer.consume(_FETCH, 0.1)
                except KafkaException as e:
                    log.warning("run directory: reading %s failed (reading on): %s", self.topic, e)
                    time.sleep(0.5)
                    continue
                catch_up.reached(consumer, len(messages))
                if time.monotonic() - evicted_at > EVICT_SECONDS:
                    self._evict(consumer)
                    evicted_at = time.monotonic()
                if messages and not self._hand_over(loop, messages):
                    return
        finally:
            consumer.close()

    def _hand_over(self, loop: asyncio.AbstractEventLoop, messages: list[Any]) -> bool:
        """Give a fetch to the event loop to register; False when the worker is stopping."""
        positions: list[Position] = []
        append = positions.append
        read_to: dict[int, int] = {}
        for msg in messages:
            if msg.error() is None:
                read_to[msg.partition()] = msg.offset() + 1
                pos = read_position(msg, self.framing)
                if pos is not None:
                    append(pos)
        newest = max((m.timestamp()[1] for m in messages[-8:]), default=0)  # about the newest
        if not read_to:
            return True
        while not self._room.acquire(timeout=0.5):
            if self._stop.is_set():
                return False
        try:
            loop.call_soon_threadsafe(self._registered, positions, newest, read_to)
        except RuntimeError:  # the loop closed: the worker is stopping
            return False
        return True

    def _evict(self, consumer: Any) -> None:
        """Forget the starts the records topic no longer holds (its retention deleted them)."""
        lows = {p: low for p, (low, _) in watermarks(consumer, self.topic, self.partitions).items()}
        evicted = self.directory.evict_below(lows)
        if evicted:
            log.info(
                "run directory: %d starts evicted (below the low watermarks %s of %s)",
                evicted,
                lows,
                self.topic,
            )
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self.directory.forget, evicted)


class CatchUp:
    """Logs, once, how many records the directory read to reach the ends the topic had at its start."""

    def __init__(self, topic: str, ends: dict[int, tuple[int, int]], start_at: dict[int, int]) -> None:
        self.topic = topic
        self.kept = bool(start_at)
        self.behind = {p: high for p, (low, high) in ends.items() if max(start_at.get(p, low), low) < high}
        self.read = 0
        self.started = time.monotonic()
        self.done = False
        log.info(
            "run directory: reading %d partitions of %s from %s",
            len(ends),
            topic,
            f"the offsets kept in its data dir {start_at}" if self.kept else "the beginning",
        )

    def reached(self, consumer: Any, count: int) -> bool:
        """True once, when every partition has been read up to its end at the start."""
        from confluent_kafka import TopicPartition

        if self.done:
            return False
        self.read += count
        if self.behind:  # a read_committed position passes transaction markers and aborted records
            for tp in consumer.position([TopicPartition(self.topic, p) for p in self.behind]):
                if tp.offset >= self.behind[tp.partition]:
                    del self.behind[tp.partition]
        if self.behind:
            return False
        self.done = True
        log.info(
            "run directory: caught up with %s: %d records read in %.1f s (%s)",
            self.topic,
            self.read,
            time.monotonic() - self.started,
            "went on from its data dir" if self.kept else "read from the beginning",
        )
        return True

"""The faust app of the lineage stream: the input topic faust reads for the agent, and the topics.

faust reads the input and runs the agent, its timers and its rebalance hooks; the run-state table
is the worker's own (``olstream.streams.runtime.run_store``), so that its state follows the batch's
Kafka writes (and transactions) and a restore reads only committed changelog writes. The agent
(``olstream.streams.runtime.agent``) stays thin; everything event-shaped is in
``olstream.streams.processor`` / ``olstream.streams.mapping``, which import no faust.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import faust
from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

from olstream.contract import topics
from olstream.shared.kafka_admin import check_connection, ensure_topic, fit_limit, topic_partitions
from olstream.shared.kafka_clients import (
    Kafka,
    consumer_config,
    faust_broker,
    faust_credentials,
    librdkafka_only,
)
from olstream.shared.kafka_settings import Replication
from olstream.shared.stopping import STOP_SIGNALS, install_stop_deadline, installed_deadline
from olstream.streams.runtime.input_codec import SingleObjectValues
from olstream.streams.runtime.topology import changelog_topic, match_changelog
from olstream.streams.settings import WorkerSettings

log = logging.getLogger(__name__)

RECORDS = Counter("olstream_stream_records_total", "Input records processed", ["type"])
EVENTS = Counter("olstream_stream_events_total", "RunEvents emitted (including replays)", ["event_type"])
ERRORS = Counter("olstream_stream_errors_total", "Bad input records sent to the errors topic", ["reason"])
PARENT_NOT_VISIBLE = Counter(
    "olstream_stream_parent_not_visible_total",
    "Child runs emitted without a parent edge: what the edge needs of the parent (its identity, and "
    "with hierarchical job names its job path) is neither on the child's record nor in this worker's state",
)
PARENT_OUTCOMES = Counter(
    "olstream_stream_parent_lookups_total",
    "Child runs whose parent was looked up in the run directory, by outcome: found, absent (not in "
    "the log up to the child's heads, or refused), ambiguous (its engine run id on two or more other "
    "log partitions), too_old (older than --parent-retention)",
    ["outcome"],
)
CHILDREN_WAITING = Gauge(
    "olstream_stream_children_waiting",
    "Child runs waiting for the run directory to read every log partition up to their heads",
)
PARENT_WAIT_SECONDS = Histogram(
    "olstream_stream_parent_wait_seconds",
    "Wall time a child run with heads waited for the run directory before it was processed (every such "
    "child, zero waits included: the START delay the directory adds)",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0),
)
PARENT_WAIT_RECORD_SECONDS = Histogram(
    "olstream_stream_parent_wait_record_seconds",
    "Record time a child run waited: how far behind its append time the directory's newest record was",
    buckets=(0.0, 0.01, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 86400.0),
)
MEMBERSHIP_REFUSED = Counter(
    "olstream_stream_membership_refused_total",
    "Commits the group refused when the worker confirmed its membership before processing a record "
    "(the group had dropped it or was rebalancing): the record waited for the rebalance instead",
)
DIRECTORY_STARTS = Gauge("olstream_stream_directory_runs", "Run starts held by the run directory")
JOB_PATH_TOO_LONG = Counter(
    "olstream_stream_job_path_too_long_total",
    "Child runs whose hierarchical job path would exceed the limit: named by a new path, no parent edge",
)
REDRIVEN = Counter(
    "olstream_stream_redriven_records_total",
    "Error records sent again by olstream errors redrive (olstream.redrive.attempt): processed as new, "
    "past the marks",
)
REPLAYS = Counter(
    "olstream_stream_replayed_records_total", "Records that re-emitted or changed nothing (replays)"
)
EVICTED = Counter("olstream_stream_evicted_runs_total", "Finished runs evicted after the retention window")
RETAINED = Gauge(
    "olstream_stream_finished_runs_retained", "Finished runs kept for replays (retention window)"
)
INPUT_REREAD = Counter(
    "olstream_stream_input_reread_total",
    "Input records fetched but never handed to the agent, found by the commit ledger and read again",
)
FENCES = Counter(
    "olstream_stream_fenced_total",
    "Batches dropped because another worker had taken one of their input partitions (exactly_once: the "
    "group had dropped this worker, which then waited for the rebalance)",
)
BATCH_SECONDS = Gauge("olstream_stream_last_batch_seconds", "Wall time of the last processed batch")
INPUT_LAG = Gauge(
    "olstream_stream_input_lag",
    "Records of an owned input partition past the group's committed offset (the partition's end offset "
    "minus the commit), per input topic partition; refreshed every 2 s",
    ["partition"],
)

CHANGELOG_CONFIG = {"cleanup.policy": "compact"}  # and the size of `topics.size_config`


@cache
def record_counter(record_type: str) -> Any:
    return RECORDS.labels(record_type)


@cache
def event_counter(event_type: str) -> Any:
    return EVENTS.labels(event_type)


@dataclass(frozen=True)
class StreamApp:
    settings: WorkerSettings
    app: faust.App
    input_topic: Any
    output_topic: Any
    errors_topic: Any
    partitions: int


def prepare_topics(settings: WorkerSettings) -> tuple[int, WorkerSettings]:
    """Create the input/output/errors topics when missing; the input's partition count, and the
    settings with `max_event_bytes` fitted to what an existing output topic accepts and the
    replication resolved for this cluster (faust's changelog takes it too).

    Topics it creates accept messages of `--max-event-bytes` (`topics.size_config`); the output
    gets `--output-partitions`, whatever the input has.
    """
    kafka = settings.connection
    brokers = check_connection(kafka)
    replication = Replication(*settings.replication.resolved(brokers))
    sized = topics.size_config(settings.max_event_bytes)
    ensure_topic(kafka, settings.input_topic, settings.default_partitions, sized, replication=replication)
    partitions = topic_partitions(kafka, settings.input_topic)
    if partitions is None:
        raise RuntimeError(f"input topic {settings.input_topic!r} does not exist after creating it")
    match_changelog(kafka, settings.app_id, settings.input_topic, partitions)
    changelog = {**CHANGELOG_CONFIG, **sized}
    ensure_topic(kafka, changelog_topic(settings.app_id), partitions, changelog, replication=replication)
    ensure_topic(kafka, settings.output_topic, settings.output_partitions, sized, replication=replication)
    ensure_topic(kafka, settings.errors_topic, 1, sized, replication=replication)
    if ignored := librdkafka_only(kafka):
        log.info("Kafka properties for librdkafka clients only (faust's aiokafka ignores them): %s", ignored)
    limit = fit_limit(
        kafka,
        settings.output_topic,
        settings.max_event_bytes,
        topics.MESSAGE_HEADROOM_BYTES,
        "--max-event-bytes",
    )
    return partitions, replace(settings, max_event_bytes=limit, replication=replication)


def build_app(settings: WorkerSettings, partitions: int) -> StreamApp:
    factor, _ = settings.replication.resolved(1)  # resolved by prepare_topics
    app = faust.App(
        settings.app_id,
        broker=faust_broker(settings.connection),
        broker_credentials=faust_credentials(settings.connection),
        broker_client_id=settings.client_id or f"olstream-worker-{socket.gethostname()}-{os.getpid()}",
        store="memory://",  # no faust table: the run states are the worker's own (run_store.py)
        datadir=settings.data_dir,
        processing_guarantee="at_least_once",
        topic_partitions=partitions,
        topic_replication_factor=factor,
        topic_allow_declare=True,
        table_standby_replicas=0,
        web_enabled=False,
        producer_acks=-1,
        producer_linger_ms=5,
        producer_max_batch_size=1_048_576,
        # the changelog carries run states up to --max-event-bytes; a fetch takes a whole one
        producer_max_request_size=settings.max_event_bytes + topics.MESSAGE_HEADROOM_BYTES,
        consumer_max_fetch_size=max(1_048_576, settings.max_event_bytes + topics.MESSAGE_HEADROOM_BYTES),
        consumer_auto_offset_reset="earliest",
        stream_wait_empty=True,  # faust's rebalance waits for its own acks (none on the input: acks=False)
        broker_commit_every=10_000,
        broker_commit_interval=1.0,
        broker_session_timeout=settings.session_timeout,
        consumer_metadata_max_age_ms=int(settings.metadata_refresh * 1000),
        broker_heartbeat_interval=min(3.0, settings.session_timeout / 3),
        key_serializer="raw",
        value_serializer="raw",
    )
    input_topic = app.topic(
        settings.input_topic,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer=SingleObjectValues(settings.input_topic),  # both wire formats, as single-object
        partitions=partitions,
        internal=False,
        acks=False,  # faust never acks, gap-fills or commits the input: the worker's checkpoint does
    )
    output_topic = app.topic(
        settings.output_topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
    )
    errors_topic = app.topic(
        settings.errors_topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
    )
    return StreamApp(settings, app, input_topic, output_topic, errors_topic, partitions)


class StreamWorkerProcess(faust.Worker):
    """faust's worker, with the stop deadline (`olstream.shared.stopping`) chained onto its signals.

    mode installs its SIGTERM/SIGINT handlers with `loop.add_signal_handler` in
    `install_signal_handlers` (from the worker's first start); the deadline is chained right after,
    so that faust still sees the signal and runs its own stop, and the process leaves with
    `STOP_TIMEOUT` when that stop does not end within `--stop-timeout` (an agent that never
    returns, a rebalance or shutdown that waits forever for acks). Checked again once the app has
    started, in case anything installed handlers over it meanwhile.
    """

    stop_timeout: float = 30.0

    def install_signal_handlers(self) -> None:
        super().install_signal_handlers()
        self.chain_stop_deadline()

    def chain_stop_deadline(self) -> None:
        if all(installed_deadline(sig) is not None for sig in STOP_SIGNALS):
            return
        install_stop_deadline(self.stop_timeout, "worker")
        log.info("a stop signal leaves after %.1f s at most (--stop-timeout)", self.stop_timeout)

    #: what SIGUSR1 logs before faust prints its threads and tasks (the worker's input positions)
    describe_input: Callable[[], str] | None = None

    def _on_sigusr1(self) -> None:
        try:
            if self.describe_input is not None:
                log.warning("SIGUSR1: where the worker reads its input:\n%s", self.describe_input())
        except Exception as e:  # a diagnosis must not hide the task dump that follows
            log.warning("SIGUSR1: could not describe the worker's input: %s", e)
        super()._on_sigusr1()  # mode's worker: every thread's stack and every asyncio task, to stderr

    async def on_startup_finished(self) -> None:
        await super().on_startup_finished()
        if any(installed_deadline(sig) is None for sig in STOP_SIGNALS):
            log.warning("the stop deadline's signal handlers were replaced: chaining them again")
            self.chain_stop_deadline()


# The cyclic garbage collector's thresholds in the worker (CPython's are 700, 10, 10). Nearly every
# object the worker frees is freed by reference counting; with the defaults a full collection, which
# walks every live object (faust, the caches), would run every few seconds and cost a measurable
# share of the worker's time (docs/benchmarks.md "Worker"). The worker's records still free cycles,
# only in fewer passes.
GC_THRESHOLDS = (50_000, 20, 100)


class GarbageCollectionTimer:
    """Adds up each collection's wall time (a `gc.callbacks` entry), exported as the counter
    ``olstream_stream_gc_seconds_total`` by `collect`.

    The callback takes no lock: it runs inside a collection, in whichever thread triggered it, and a
    prometheus_client metric's lock held by that same thread (the metrics server reading it) would
    deadlock it (prometheus/client_python#363). A float's += is atomic under the GIL.
    """

    def __init__(self) -> None:
        self.started = 0.0
        self.seconds = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self.started

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "olstream_stream_gc_seconds",
            "Wall time the worker spent in the cyclic garbage collector (every generation)",
            value=self.seconds,
        )


GC_TIMER = GarbageCollectionTimer()
REGISTRY.register(GC_TIMER)


def drop_monitor_sensor(app: Any) -> None:
    """Take faust's Monitor off the app's sensors (public API: ``app.sensors``, ``app.monitor``).

    The Monitor keeps per-event statistics for faust's web pages, which the worker does not serve
    (``web_enabled=False``; its metrics are olstream's own), yet its callbacks run for every event
    (their cost: docs/worker.md). faust adds it when the app starts, before any agent runs; faust's
    own direct calls to ``app.monitor`` still reach it: only its callbacks as a sensor are dropped.
    """
    monitor = app.monitor
    if monitor in set(app.sensors):
        app.sensors.remove(monitor)
        log.debug("faust's Monitor sensor removed (no per-event statistics)")


def worker_process(sa: StreamApp, describe_input: Callable[[], str] | None = None) -> StreamWorkerProcess:
    """The faust worker that runs the app (logging stays olstream's own); the objects built so far are
    left out of later garbage collections (`gc.freeze`), collections run less often
    (`GC_THRESHOLDS`), and their time is counted (`GC_TIMER`)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    if GC_TIMER not in gc.callbacks:
        gc.callbacks.append(GC_TIMER)
    worker = StreamWorkerProcess(
        sa.app, loglevel=logging.getLogger().level, override_logging=False, quiet=True
    )
    worker.stop_timeout = sa.settings.stop_timeout
    worker.describe_input = describe_input
    return worker


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
        """The group's metadata for `send_offsets_to_transaction`: this consumer never subscribes
        (generation -1, no member id), which the broker accepts beside the group's active members
        and which no rebalance makes stale."""
        return self._consumer.consumer_group_metadata()

    async def committed(self, partitions: list[int]) -> dict[int, int]:
        """The group's committed offset (next offset to read) of each partition that has one."""
        return await asyncio.get_running_loop().run_in_executor(None, self._committed, partitions)
